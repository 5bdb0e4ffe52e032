"""select end to end on a real model: table profiled once and reused, plan runs and matches ORT."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from rlcompile.cli import main
from rlcompile.graph.cleanup import clean_model
from rlcompile.layer.per_operator.api import select
from rlcompile.layer.per_operator.engine import Engine
from rlcompile.layer.per_operator.network import network_from_model
from rlcompile.layer.table import SINK, SOURCE
from rlcompile.measure import QUICK
from rlcompile.models import load_model
from rlcompile.runtimes.ort import run_proto
from rlcompile.verify import compare_outputs


def test_network_fuses_batchnorm_and_links_every_layer():
    network = network_from_model(clean_model(load_model("resnet18")))
    assert not any(layer.op_type == "BatchNormalization" for layer in network.layers)
    names = {layer.name for layer in network.layers}
    assert all(edge.producer in names | {SOURCE} and edge.consumer in names | {SINK} for edge in network.edges)
    residual_adds = [layer for layer in network.layers if layer.op_type == "Add"]
    assert len(residual_adds) == 8 and all(len(network.incoming(layer.name)) == 2 for layer in residual_adds)


def test_select_profiles_once_and_every_plan_runs(tmp_path: Path):
    model = load_model("lenet5")
    first = select(model, "exact", table_dir=tmp_path, timing=QUICK)
    assert not first.table_reused and first.agreement.within() and first.result.extra["proven_optimal"]
    assert first.plan_ms.median_ms > 0 and first.ort_ms.median_ms > 0
    second = select(model, "qlearning", table_dir=tmp_path, timing=None, episodes=200)
    assert second.table_reused and second.agreement.within()
    assert second.result.total_ms >= first.result.total_ms - 1e-9
    network = network_from_model(clean_model(model))
    for agent in ("greedy", "single", "random"):
        run = select(model, agent, table_dir=tmp_path, timing=None, **({"episodes": 50} if agent == "random" else {}))
        feeds = model.random_inputs(3)
        outputs = Engine(network, run.plan).run(feeds)
        assert compare_outputs(run_proto(model.proto, feeds), outputs).within()


def test_engine_converts_layouts_between_primitives():
    model = load_model("lenet5")
    network = network_from_model(clean_model(model))
    plan = {layer.name: "ort:basic" for layer in network.layers}
    convs = [layer.name for layer in network.layers if layer.op_type == "Conv"]
    plan[convs[0]] = "torch:onednn_nhwc"  # NHWC in the middle of an NCHW plan
    feeds = model.random_inputs(0)
    assert np.allclose(Engine(network, plan).run(feeds)[0], run_proto(model.proto, feeds)[0], rtol=1e-4, atol=1e-5)


def test_select_cli_writes_the_plan(tmp_path: Path, capsys):
    plan_file = tmp_path / "plan.json"
    code = main(["select", "lenet5", "--per-operator", "--agent", "qlearning", "--episodes", "100", "--quick",
                 "-o", str(plan_file), "--table-dir", str(tmp_path)])  # fmt: skip
    assert code == 0
    out = capsys.readouterr().out
    assert "predicted (table) latency" in out and "outputs agree with ONNX Runtime" in out
    plan = json.loads(plan_file.read_text())
    assert plan["agent"] == "qlearning" and plan["episodes"] == 100 and plan["measured_plan_ms"] > 0
    assert set(plan["plan"]) == {row["layer"] for row in plan["layers"]}


def test_select_bad_options_exit_2(capsys):
    assert main(["select", "lenet5", "--agent", "dqn"]) == 2
    assert main(["select", "lenet5", "--episodes", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "unknown layer agent 'dqn'" in err[0] and "empty budget" in err[1]
