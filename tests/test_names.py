"""The light registry of names: every factory creates exactly the names the CLI offers, and reading the
names imports no heavy library."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rlcompile import names


def test_every_factory_creates_exactly_the_names_listed():
    from rlcompile.graph import cost, search
    from rlcompile.kernel import scheduler, strategies
    from rlcompile.layer import solvers

    assert set(strategies.STRATEGIES) == set(names.KERNEL_STRATEGIES)
    assert set(strategies.SAMPLING_STRATEGIES) == set(names.SAMPLING_STRATEGIES)
    assert set(solvers.SOLVERS) == set(names.LAYER_SOLVERS)
    assert set(search.SEARCHES) == set(names.GRAPH_SEARCHES)
    assert set(search.LEARNING_AGENTS) == set(names.GRAPH_LEARNING_AGENTS)
    assert set(cost.COST_MODELS) == set(names.GRAPH_COSTS)
    assert {scheduler.create(name).name for name in names.KERNEL_SCHEDULERS} == set(names.KERNEL_SCHEDULERS)


@pytest.mark.parametrize("name", names.RUNTIMES)
def test_every_runtime_name_creates_that_runtime(name: str):
    from rlcompile import runtimes

    assert runtimes.create(name).name == name


def test_the_names_and_the_cli_parser_import_no_heavy_library():
    code = ("import sys, rlcompile.names, rlcompile.cli; rlcompile.cli.build_parser(); "
            "print(','.join(m for m in ('torch', 'tvm', 'onnxruntime', 'openvino') if m in sys.modules))")  # fmt: skip
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert loaded == ""
