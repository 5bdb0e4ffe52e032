"""Every subcommand x every kind of bad input: exit status 2, one line, no traceback, nothing written.

The table is the contract of the CLI: a user's mistake (a missing or broken file, dynamic dims with
no ``--input-shape``, a wrong shape, an empty budget, an unknown agent, strategy or target, an output
that cannot be written) gets one line that says what is wrong, and leaves nothing behind that a later
run could mistake for a result.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rlcompile.cli import main
from rlcompile.kernel.workdir import WorkDir

#: How each subcommand is called on a model; {model} and {out} are filled per case.
COMMANDS = {
    "run": ["run", "{model}", "--quick"],
    "compare": ["compare", "{model}", "--runtimes", "ort", "--quick"],
    "tasks": ["tasks", "{model}"],
    "tune": ["tune", "{model}", "--work-dir", "{out}/work", "--trials", "2"],
    "build": ["build", "{model}", "--work-dir", "{work}", "-o", "{out}/model.tar"],
    "graph": ["graph", "{model}", "--agent", "greedy", "--steps", "1", "-o", "{out}/graph.onnx"],
    "select": ["select", "{model}", "--agent", "greedy", "-o", "{out}/plan", "--table-dir", "{out}/tables"],
    "optimize": ["optimize", "{model}", "-o", "{out}/opt", "--levels", "layer"],
    "graph-train": ["graph-train", "--models", "{model}", "--checkpoint", "{out}/agent.pt", "--train-episodes", "1"],
    "export": ["export", "{model}", "--to", "onnxruntime", "-o", "{out}/exported"],
    "pretrain": ["pretrain", "{model}", "-o", "{out}/model.json"],
}
#: Commands that take a model (export takes a plan directory, pretrain work directories: their cases are below).
MODEL_COMMANDS = [name for name in COMMANDS if name not in ("export", "pretrain")]

#: Bad models: (model placeholder, extra flags, what the line must say).
MODEL_CASES = {
    "missing file": ("{tmp}/missing.onnx", [], "no such model file"),
    "unknown name": ("resnet-9000", [], "unknown model"),
    "not onnx": ("{garbage}", [], "cannot read ONNX model"),
    "truncated onnx": ("{truncated}", [], "ONNX model"),
    "a directory (an unfinished plan)": ("{tmp}", [], "not an ONNX file nor a finished plan directory"),
    "dynamic dims without shapes": ("{dynamic}", [], "has dynamic dims"),
    "wrong --input-shape name": ("{dynamic}", ["--input-shape", "image=1,3,8,8"], "has inputs: x["),
    "wrong --input-shape rank": ("{dynamic}", ["--input-shape", "x=1,3,8"], "has 3 dims"),
    "malformed --input-shape": ("lenet5", ["--input-shape", "input=1,x"], "bad --input-shape"),
}

#: Bad options per subcommand: (flags added to the command on lenet5, what the line must say).
OPTION_CASES = [
    ("run", ["--min-time", "0"], "--min-time must be positive"),
    ("run", ["--runtime", "tvm", "--target", "vulkan-9000"], "unknown target"),
    ("run", ["--runtime", "trt"], "invalid choice"),
    ("compare", ["--min-time", "-1"], "--min-time must be positive"),
    ("compare", ["--runtimes", "ort,trt"], "unknown runtime 'trt'"),
    ("tasks", ["--target", "vulkan-9000"], "unknown target"),
    ("tune", ["--trials", "0"], "--trials must be positive"),
    ("tune", ["--trials", "-5"], "--trials must be positive"),
    ("tune", ["--batch-size", "0"], "batch"),
    ("tune", ["--agent", "alphazero"], "alphazero"),
    ("tune", ["--target", "vulkan-9000"], "unknown target"),
    ("tune", ["--cost-model", "{tmp}/nowhere.json"], "--cost-model"),
    ("tune", ["--cost-model", "{garbage}"], "not an rlcompile cost model"),
    ("optimize", ["--cost-model", "{tmp}/nowhere.json"], "--cost-model"),
    ("build", ["--target", "vulkan-9000"], "unknown target"),
    ("graph", ["--steps", "0"], "--steps"),
    ("graph", ["--budget", "0"], "--budget"),
    ("graph", ["--train-episodes", "-1"], "--train-episodes"),
    ("graph", ["--agent", "alphago"], "alphago"),
    ("graph-train", ["--steps", "0"], "--steps"),
    ("graph-train", ["--budget", "0"], "--budget"),
    ("graph-train", ["--cost", "measured"], "invalid choice"),
    ("select", ["--episodes", "0"], "--episodes"),
    ("select", ["--threads", "-1"], "--threads"),
    ("select", ["--agent", "oracle"], "oracle"),
    ("select", ["--runtimes", "ort,cudnn"], "cudnn"),
    ("select", ["--budget", "soon"], "--budget"),
    ("optimize", ["--budget", "0"], "positive duration"),
    ("optimize", ["--budget", "-1m"], "--budget"),
    ("optimize", ["--trials", "0"], "--trials"),
    ("optimize", ["--graph-agent", "alphago"], "alphago"),
    ("optimize", ["--kernel-agent", "alphazero"], "alphazero"),
    ("optimize", ["--layer-agent", "oracle"], "oracle"),
    ("optimize", ["--levels", "graph,kernels"], "--levels"),
    ("select", ["--precision", "int4"], "invalid choice"),
    ("optimize", ["--precision", "int8", "--tolerance", "-0.1"], "--tolerance"),
    ("optimize", ["--precision", "auto", "--data", "{tmp}/nowhere.npz"], "--data"),
    ("optimize", ["--precision", "auto", "--metric", "no_such_module:error"], "--metric"),
    ("select", ["--metric", "top1"], "--precision"),
    ("export", ["--to", "tensorrt"], "invalid choice"),
    ("select", ["--input-shape", "input=1-8,1,32,32"], "ranges and sets are taken by optimize"),
    ("optimize", ["--objective", "qps"], "invalid choice"),
    ("optimize", ["--objective", "throughput", "--concurrency", "0"], "--concurrency 0"),
    ("optimize", ["--concurrency", "4"], "--concurrency is read under --objective throughput"),
    ("select", ["--concurrency", "4"], "--concurrency is read under --objective throughput"),
    ("run", ["--objective", "throughput", "--concurrency", "-2"], "--concurrency -2"),
    ("run", ["--objective", "throughput"], "takes a plan directory"),
    ("run", ["--input-shape", "input=1|2,1,32,32"], "ranges and sets are taken by optimize"),
    ("optimize", ["--input-shape", "input=1-8,1,32,32"], "needs an ONNX file with dynamic dims"),
]

#: Bad shape profiles for ``optimize`` on the dynamic model: (``--input-shape`` value, what the line must say).
PROFILE_CASES = {
    "a range upside down": ("x=8-1,3,16,16", "LOW <= HIGH"),
    "a zero size": ("x=0-4,3,16,16", "all positive"),
    "a word": ("x=1-4,3,big,16", "each dim is N, LOW-HIGH"),
    "a range over a fixed dim": ("x=1-4,1-3,16,16", "the model fixes it to 3"),
    "a wrong rank": ("x=1-4,3,16", "has 3 dims"),
    "an unknown input": ("image=1-4,3,16,16", "has inputs: x["),
}

#: Bad plans for ``export`` (the model slot holds the plan directory): (plan placeholder, what the line must say).
EXPORT_CASES = {
    "not a plan directory": ("{tmp}", "is not an rlcompile plan directory"),
    "a model file": ("{dynamic}", "is not an rlcompile plan directory"),
    "missing": ("{tmp}/nowhere", "is not an rlcompile plan directory"),
}

#: Bad sources for ``pretrain`` (the model slot holds a work directory): (placeholder, what the line must say).
PRETRAIN_CASES = {
    "not a work directory": ("{tmp}/nowhere", "not a tuning work directory"),
    "a model instead": ("{dynamic}", "not a tuning work directory"),
    "a work directory without measurements": ("{work}", "not a tuning work directory"),
}

#: Where each subcommand writes, redirected below a regular file so that it cannot be created.
UNWRITABLE = {
    "run": ["--json", "{blocker}/r.json"],
    "compare": ["--json", "{blocker}/c.json"],
    "tune": ["--work-dir", "{blocker}/work"],
    "build": ["-o", "{blocker}/model.tar"],
    "graph": ["-o", "{blocker}/graph.onnx"],
    "graph-train": ["--checkpoint", "{blocker}/agent.pt"],
    "select": ["-o", "{blocker}/plan"],
    "optimize": ["-o", "{blocker}/opt"],
    "export": ["-o", "{blocker}/exported"],
    "pretrain": ["-o", "{blocker}/model.json"],
}


@pytest.fixture
def places(tmp_path: Path, garbage_file: Path, dynamic_conv_model: Path) -> dict[str, str]:
    truncated = tmp_path / "truncated.onnx"
    truncated.write_bytes(dynamic_conv_model.read_bytes()[:200])
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where a directory is needed")
    work = tmp_path / "existing-work"
    WorkDir(work, "llvm")
    out = tmp_path / "out"
    out.mkdir()
    paths = {"tmp": tmp_path, "garbage": garbage_file, "truncated": truncated, "dynamic": dynamic_conv_model,
             "blocker": blocker, "work": work, "out": out}  # fmt: skip
    return {key: str(value) for key, value in paths.items()}


def command(name: str, model: str, extra: list[str], places: dict[str, str]) -> list[str]:
    """The argv of ``name``; ``extra`` flags replace a flag of the template when they name the same one."""
    template = list(COMMANDS[name])
    for flag, value in zip(extra[::2], extra[1::2], strict=True):
        if flag in template:
            template[template.index(flag) + 1] = value
        else:
            template += [flag, value]
    return [part.format(model=model, **places) for part in template]


def assert_refused(argv: list[str], message: str, out: Path, capsys) -> None:
    assert main(argv) == 2, argv
    error = capsys.readouterr().err.strip()
    assert error.startswith("rlcompile: error: "), error
    assert "\n" not in error and "Traceback" not in error, error
    assert message in error, (message, error)
    leftovers = [p for p in out.rglob("*") if p.is_file() and p.name not in (".lock", "environment.json")]
    assert not leftovers, f"{argv} left {leftovers}"


@pytest.mark.parametrize("case", list(MODEL_CASES))
@pytest.mark.parametrize("name", MODEL_COMMANDS)
def test_bad_models_are_refused_in_one_line(name: str, case: str, places, capsys) -> None:
    model, extra, message = MODEL_CASES[case]
    argv = command(name, model.format(**places), extra, places)
    assert_refused(argv, message, Path(places["out"]), capsys)


@pytest.mark.parametrize(("name", "extra", "message"), OPTION_CASES)
def test_bad_options_are_refused_in_one_line(name: str, extra: list[str], message: str, places, capsys) -> None:
    assert_refused(command(name, "lenet5", extra, places), message, Path(places["out"]), capsys)


@pytest.mark.parametrize("case", list(PROFILE_CASES))
def test_bad_shape_profiles_are_refused_in_one_line(case: str, places, capsys) -> None:
    value, message = PROFILE_CASES[case]
    argv = command("optimize", places["dynamic"], ["--input-shape", value], places)
    assert_refused(argv, message, Path(places["out"]), capsys)


@pytest.mark.parametrize("case", list(EXPORT_CASES))
def test_bad_plans_are_refused_for_export_in_one_line(case: str, places, capsys) -> None:
    plan, message = EXPORT_CASES[case]
    assert_refused(command("export", plan.format(**places), [], places), message, Path(places["out"]), capsys)


@pytest.mark.parametrize("case", list(PRETRAIN_CASES))
def test_bad_sources_are_refused_for_pretrain_in_one_line(case: str, places, capsys) -> None:
    source, message = PRETRAIN_CASES[case]
    assert_refused(command("pretrain", source.format(**places), [], places), message, Path(places["out"]), capsys)


@pytest.mark.parametrize("name", list(UNWRITABLE))
def test_an_output_that_cannot_be_written_is_refused_before_any_work(name: str, places, capsys) -> None:
    argv = command(name, "lenet5", [part.format(**places) for part in UNWRITABLE[name]], places)
    assert_refused(argv, "cannot be written", Path(places["out"]), capsys)


def test_every_subcommand_is_in_the_table() -> None:
    from rlcompile.cli import build_parser

    parser = build_parser()
    subcommands = set(parser._subparsers._group_actions[0].choices)  # type: ignore[union-attr]
    assert subcommands - {"models"} == set(COMMANDS)
