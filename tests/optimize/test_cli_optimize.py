"""``rlcompile optimize`` refuses bad input with one line and exit status 2, before any work."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlcompile.cli import main


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--budget", "ten"], "--budget 'ten'"),
        (["--budget", "0s"], "positive duration"),
        (["--levels", "graph,kernels"], "--levels"),
        (["--graph-agent", "alphago"], "alphago"),
        (["--kernel-agent", "bogus"], "bogus"),
        (["--layer-agent", "oracle"], "oracle"),
        (["--runtimes", "ort,cudnn"], "cudnn"),
        (["--trials", "0"], "--trials"),
        (["--threads", "0"], "--threads"),
        (["--min-time", "0"], "--min-time must be positive"),
    ],
)
def test_bad_options_get_one_line_and_status_2(extra, message, tmp_path: Path, capsys):
    assert main(["optimize", "lenet5", "-o", str(tmp_path / "out"), *extra]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("rlcompile: error:") and message in error and "\n" not in error
    assert not (tmp_path / "out").exists()


def test_a_dynamic_model_without_input_shape_is_refused(dynamic_conv_model: Path, tmp_path: Path, capsys):
    assert main(["optimize", str(dynamic_conv_model), "-o", str(tmp_path / "out"), "--levels", "layer"]) == 2
    assert "--input-shape" in capsys.readouterr().err


def test_output_path_that_is_a_file_is_refused(tmp_path: Path, capsys):
    target = tmp_path / "taken"
    target.write_text("not a directory")
    assert main(["optimize", "lenet5", "-o", str(target), "--levels", "layer"]) == 2
    assert "not a directory" in capsys.readouterr().err
