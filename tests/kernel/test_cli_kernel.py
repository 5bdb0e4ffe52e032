"""`rlcompile tasks / tune / build / run model.tar` end to end on LeNet-5 with a tiny budget."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlcompile.cli import main
from tests.sleeps import sleeps_per_call


@pytest.fixture(scope="module")
def tuned(tmp_path_factory) -> Path:
    work_dir = tmp_path_factory.mktemp("lenet5_work")
    assert main(["tune", "lenet5", "--agent", "random", "--trials", "16", "--batch-size", "8",
                 "--work-dir", str(work_dir), "--seed", "1"]) == 0  # fmt: skip
    return work_dir


def test_tasks_lists_the_model(capsys) -> None:
    assert main(["tasks", "lenet5"]) == 0
    out = capsys.readouterr().out
    assert "lenet5:" in out and "conv2d 1x32x32->6 k5 s1" in out and "share" in out


def test_tune_writes_journal_and_summary(tuned: Path) -> None:
    journal = (tuned / "measurements.jsonl").read_text().splitlines()
    assert len(journal) == 16
    summary = json.loads((tuned / "tune_summary.json").read_text())
    funded = [task for task in summary["tasks"] if task["budget"]]
    assert [task["trials"] for task in funded] == [8, 8]
    assert all(task["best_ms"] > 0 and task["statuses"].get("ok") for task in funded)


def test_rerunning_tune_resumes(tuned: Path, capsys) -> None:
    assert main(["tune", "lenet5", "--agent", "random", "--trials", "16", "--batch-size", "8",
                 "--work-dir", str(tuned), "--seed", "1"]) == 0  # fmt: skip
    assert "resumed: 16 measurements" in capsys.readouterr().err
    assert len((tuned / "measurements.jsonl").read_text().splitlines()) == 16


def test_build_and_run_the_artifact(tuned: Path, tmp_path: Path, capsys) -> None:
    artifact = tmp_path / "lenet5.tar"
    assert main(["build", "lenet5", "--work-dir", str(tuned), "-o", str(artifact)]) == 0
    assert "2 of" in capsys.readouterr().out and artifact.exists()
    assert main(["run", str(artifact), "--quick", "--json", str(tmp_path / "run.json")]) == 0
    out = capsys.readouterr().out
    assert "agrees with ONNX Runtime" in out and "2/" in out and "x ONNX Runtime native" in out
    result = json.loads((tmp_path / "run.json").read_text())["results"][0]
    assert result["agreement"]["max_rel"] < 1e-3 and result["latency"]["median_ms"] > 0
    # two saved results side by side (here the same one twice): alternating rounds, ratio to the first
    assert main(["run", str(artifact), str(artifact), "--quick", "--json", str(tmp_path / "two.json")]) == 0
    both = json.loads((tmp_path / "two.json").read_text())
    results = both["results"]
    assert len(results) == 2 and results[0]["ratio_to_first"] == 1.0 and 0.5 < results[1]["ratio_to_first"] < 2
    assert 0 <= both["noise"] < 1  # two identical ORT native sessions in the same rounds: the ratios' noise
    assert f"x {artifact}" in capsys.readouterr().out


def test_tvms_worker_stays_awake_between_the_kernels_of_one_call(tuned: Path, tmp_path: Path) -> None:
    """At rlcompile's spin count TVM's worker spins through the gaps between a call's parallel kernels instead of
    sleeping after each (2-4 sleeps a call on this artefact at spin 0, and the build 1.7-4.5x slower)."""
    artifact = tmp_path / "lenet5.tar"
    assert main(["build", "lenet5", "--work-dir", str(tuned), "-o", str(artifact)]) == 0
    setup = f"""
from rlcompile.saved import load_saved
saved = load_saved({str(artifact)!r})
call = saved.timed(saved.reference_inputs).call
"""
    assert sleeps_per_call(setup, below=1) < 1


def test_config_file_is_equivalent_to_flags(tmp_path: Path, capsys) -> None:
    config = tmp_path / "tune.json"
    work_dir = tmp_path / "w"
    config.write_text(json.dumps({"strategy": "sa", "trials": 8, "batch-size": 8, "work_dir": str(work_dir),
                                  "tasks": "0"}))  # fmt: skip
    assert main(["tune", "lenet5", "--config", str(config)]) == 0
    summary = json.loads((work_dir / "tune_summary.json").read_text())
    assert summary["request"]["agent"] == "sa"
    assert [t["trials"] for t in summary["tasks"]] == [8]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["tune", "lenet5", "--trials", "0", "--work-dir", "{tmp}"], "--trials must be positive"),
        (["tune", "lenet5", "--agent", "magic", "--work-dir", "{tmp}"], "unknown strategy 'magic'"),
        (["tune", "lenet5", "--trials", "8"], "tune needs --work-dir"),
        (["tune", "lenet5", "--tasks", "42", "--work-dir", "{tmp}"], "--tasks 42"),
        (["tune", "lenet5", "--rpc-tracker", "nowhere", "--work-dir", "{tmp}"], "bad --rpc-tracker"),
        (["tune", "lenet5", "--config", "{tmp}/missing.json"], "cannot read --config"),
        (["build", "lenet5", "--work-dir", "{tmp}/empty", "-o", "{tmp}/x.tar"], "not a tuning work directory"),
        (["run", "{tmp}/fake.tar"], "not an rlcompile artefact"),
    ],
)
def test_kernel_command_errors_exit_2(args, message, tmp_path: Path, capsys) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "fake.tar").write_bytes(b"not a tar")
    assert main([a.format(tmp=tmp_path) for a in args]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and "Traceback" not in err
