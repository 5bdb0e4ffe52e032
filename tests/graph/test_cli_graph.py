"""``rlcompile graph``: rewrites, before/after table, verified output file, and bad input as exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest

from rlcompile.backends.ort import run_proto
from rlcompile.cli import main
from rlcompile.models import load_model
from rlcompile.verify import compare_outputs


def test_graph_writes_a_verified_faster_or_equal_graph(capsys, tmp_path: Path) -> None:
    output = tmp_path / "sq.onnx"
    code = main(["graph", "squeezenet1_1", "--agent", "greedy", "--steps", "3", "--quick", "-o", str(output),
                 "--json", str(tmp_path / "g.json")])  # fmt: skip
    assert code == 0
    out = capsys.readouterr().out
    assert "pull_elementwise_through_concat" in out and "agrees with the original" in out
    report = json.loads((tmp_path / "g.json").read_text())
    assert report["kept_rewrites"] == len(report["search"]["rewrites"]) == 3
    assert report["search"]["final_cost_ms"] < report["search"]["initial_cost_ms"]
    original = load_model("squeezenet1_1")
    feeds = original.random_inputs(5)
    agreement = compare_outputs(run_proto(original.proto, feeds), run_proto(onnx.load(str(output)), feeds))
    assert agreement.within()
    assert report["ratio_optimized_over_original"] > 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--agent", "alphazero"], "unknown graph agent 'alphazero'"),
        (["--steps", "0"], "empty budget"),
        (["--rules", "merge_everything"], "unknown rule 'merge_everything'"),
    ],
)
def test_graph_bad_options_exit_2(args, message, capsys) -> None:
    assert main(["graph", "lenet5", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
