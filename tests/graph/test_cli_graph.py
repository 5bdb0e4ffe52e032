"""``rlcompile graph``: rewrites, before/after table, verified output file, and bad input as exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest

from rlcompile.cli import main
from rlcompile.models import load_model
from rlcompile.runtimes.ort import run_proto
from rlcompile.verify import compare_outputs


def test_graph_writes_a_verified_faster_or_equal_graph(capsys, tmp_path: Path) -> None:
    output = tmp_path / "sq.onnx"
    code = main(["graph", "squeezenet1_1", "--agent", "greedy", "--cost", "sum", "--steps", "3", "--quick",
                 "-o", str(output), "--json", str(tmp_path / "g.json")])  # fmt: skip
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


def test_graph_train_on_two_graphs_then_the_policy_rewrites_a_third_without_training(capsys, tmp_path: Path) -> None:
    from tests.graph.test_search import inception_block

    files = []
    for name, proto in (("a", inception_block()), ("b", inception_block()), ("c", inception_block())):
        files.append(tmp_path / f"{name}.onnx")
        onnx.save(onnx.shape_inference.infer_shapes(proto), str(files[-1]))
    checkpoint = tmp_path / "agent.pt"
    code = main(["graph-train", "--models", f"{files[0]},{files[1]}", "--checkpoint", str(checkpoint),
                 "--train-episodes", "4", "--steps", "3", "--json", str(tmp_path / "train.json")])  # fmt: skip
    assert code == 0 and checkpoint.exists()
    assert "ppo trained on a, b" in capsys.readouterr().out
    assert json.loads((tmp_path / "train.json").read_text())["train_episodes"] >= 4
    code = main(["graph", str(files[2]), "--agent", "ppo", "--load", str(checkpoint), "--steps", "3", "--quick",
                 "--json", str(tmp_path / "apply.json")])  # fmt: skip
    assert code == 0
    search = json.loads((tmp_path / "apply.json").read_text())["search"]
    assert search["train_episodes"] == 0 and search["loaded"] == str(checkpoint)


def test_graph_train_world_model_then_apply_it_to_another_graph(capsys, tmp_path: Path) -> None:
    from tests.graph.test_search import inception_block

    files = [tmp_path / "a.onnx", tmp_path / "b.onnx"]
    for file in files:
        onnx.save(onnx.shape_inference.infer_shapes(inception_block()), str(file))
    checkpoint = tmp_path / "world.pt"
    code = main(["graph-train", "--agent", "world-model", "--models", str(files[0]), "--checkpoint", str(checkpoint),
                 "--train-episodes", "4", "--steps", "3", "--budget", "10"])  # fmt: skip
    assert code == 0 and checkpoint.exists() and not (tmp_path / "world.pt.training").exists()
    assert "world-model trained on a" in capsys.readouterr().out
    code = main(["graph", str(files[1]), "--agent", "world-model", "--load", str(checkpoint), "--steps", "3",
                 "--quick", "--json", str(tmp_path / "apply.json")])  # fmt: skip
    assert code == 0
    search = json.loads((tmp_path / "apply.json").read_text())["search"]
    assert search["loaded"] == str(checkpoint) and search["real_env_steps"] == 0
    code = main(["graph", str(files[1]), "--agent", "ppo", "--load", str(checkpoint), "--steps", "3", "--quick"])
    assert code == 2 and "not a PPO checkpoint" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [(["--cost", "measured"], "invalid choice: 'measured'"), (["--models", ","], "graph-train needs --models")],
)
def test_graph_train_bad_options_exit_2(args, message, capsys, tmp_path: Path) -> None:
    base = ["graph-train", "--models", "lenet5", "--checkpoint", str(tmp_path / "a.pt")]
    assert main([*base, *args]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_cli_offers_every_graph_cost_model() -> None:
    from rlcompile.cli import build_parser
    from rlcompile.graph.cost import COST_MODELS

    graph = next(action for action in build_parser()._subparsers._group_actions[0].choices["graph"]._actions
                 if "--cost" in action.option_strings)  # fmt: skip
    assert list(graph.choices) == list(COST_MODELS)
