"""The command line: each command's output, and bad input as one line with exit status 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlcompile.cli import main


def run_cli(*args: str) -> subprocess.CompletedProcess:
    """Run the real console entry point in a fresh interpreter (exit status and stderr as a user sees them)."""
    return subprocess.run(
        [sys.executable, "-m", "rlcompile", *args], capture_output=True, text=True, timeout=600,
        env=os.environ | {"COLUMNS": "200"},
    )  # fmt: skip


def test_models_lists_the_zoo_with_parameters_and_flops(capsys) -> None:
    assert main(["models", "--json"]) == 0
    listed = {item["name"]: item for item in json.loads(capsys.readouterr().out)}
    assert len(listed) == 13
    assert listed["resnet18"]["parameters"] == 11_689_512
    assert listed["bert"]["inputs"] == {"input_ids": [1, 128], "attention_mask": [1, 128]}


def test_run_prints_the_median_latency(capsys, tmp_path: Path) -> None:
    assert main(["run", "lenet5", "--runtime", "tvm", "--quick", "--json", str(tmp_path / "r.json")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("lenet5 on tvm (llvm, untuned") and "median" in out and " ms" in out
    result = json.loads((tmp_path / "r.json").read_text())["results"][0]
    assert f"{result['latency']['median_ms']:.3f} ms" in out


def test_compare_prints_a_table_with_ratio_and_agreement(capsys, tmp_path: Path) -> None:
    assert main(["compare", "lenet5", "--quick", "--json", str(tmp_path / "c.json")]) == 0
    out = capsys.readouterr().out
    for column in ("median ms", "ratio", "max abs err", "max rel err", "agrees"):
        assert column in out
    assert "1.00x" in out and "yes" in out
    assert len(json.loads((tmp_path / "c.json").read_text())["results"]) == 2


def test_compare_on_a_foreign_dynamic_model_with_input_shape(dynamic_conv_model: Path, capsys) -> None:
    assert main(["compare", str(dynamic_conv_model), "--input-shape", "x=1,3,8,8", "--quick"]) == 0
    assert "dynamic_conv" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "{dynamic}"], "input x[batch,3,height,width] float32 of dynamic_conv has dynamic dims"),
        (["run", "{garbage}"], "cannot read ONNX model"),
        (["run", "{missing}"], "no such model file"),
        (["run", "resnet1000"], "unknown model 'resnet1000'"),
        (["run", "{stft}", "--runtime", "tvm"], "TVM cannot import stft"),
        (["run", "{custom}"], "ONNX Runtime cannot run custom"),
        (["run", "lenet5", "--runtime", "tvm", "--target", "vulkan-9000"], "unknown target"),
        (["compare", "lenet5", "--runtimes", "ort,trt"], "unknown runtime 'trt'"),
        (["compare", "lenet5", "--runtimes", ","], "--runtimes is empty"),
        (["run", "lenet5", "--input-shape", "input=1,x"], "bad --input-shape"),
        (["run", "lenet5", "--min-time", "0"], "--min-time must be positive"),
    ],
)
def test_bad_input_exits_2_with_one_line(
    args, message, tmp_path, dynamic_conv_model, garbage_file, tvm_unsupported_model, unknown_op_model, capsys
) -> None:
    paths = {"dynamic": dynamic_conv_model, "garbage": garbage_file, "missing": tmp_path / "missing.onnx",
             "stft": tvm_unsupported_model, "custom": unknown_op_model}  # fmt: skip
    argv = [a.format(**paths) for a in args]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("rlcompile: error: ") and message in err
    assert "\n" not in err and "Traceback" not in err


def test_console_script_exit_status_and_no_traceback(garbage_file: Path) -> None:
    result = run_cli("run", str(garbage_file))
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "Traceback" not in result.stderr
    assert result.stderr.startswith("rlcompile: error: cannot read ONNX model")


def test_argparse_usage_errors_also_exit_2() -> None:
    assert run_cli("run").returncode == 2
    assert run_cli("run", "lenet5", "--runtime", "nope").returncode == 2


@pytest.mark.parametrize(
    ("argv", "dest", "value"),
    [
        (["run", "lenet5", "--backend", "tvm"], "runtime", "tvm"),
        (["compare", "lenet5", "--backends", "ort,openvino"], "runtimes", "ort,openvino"),
        (["select", "lenet5", "--libraries", "ort"], "runtimes", "ort"),
        (["optimize", "lenet5", "-o", "out", "--libraries", "ort"], "runtimes", "ort"),
        (["optimize", "lenet5", "-o", "out", "--strategy", "sa"], "kernel_agent", "sa"),
        (["tune", "lenet5", "--strategy", "sa"], "agent", "sa"),
        (["graph", "lenet5", "--time-limit", "30"], "budget", "30"),
        (["graph-train", "--models", "lenet5", "--checkpoint", "c", "--time-limit", "30"], "budget", "30"),
    ],
)
def test_old_flag_names_still_work_and_say_what_replaces_them(argv: list[str], dest: str, value: str) -> None:
    from rlcompile.cli import build_parser
    from rlcompile.errors import RlcompileWarning

    with pytest.warns(RlcompileWarning, match="is deprecated: use --"):
        args = build_parser().parse_args(argv)
    assert getattr(args, dest) == value
