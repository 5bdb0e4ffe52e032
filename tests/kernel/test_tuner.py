"""The tuning loop: budgets, journal, resume without re-measuring, truncated files, environment checks."""

from __future__ import annotations

import json

import pytest

from rlcompile.errors import RlcompileError, RlcompileWarning
from rlcompile.kernel import strategies
from rlcompile.kernel.tuner import Tuner
from rlcompile.kernel.workdir import WorkDir, set_aside_corrupt_lines


def tuner(task, path, trials, measurer, name="random"):
    return Tuner([task], lambda: strategies.create(name, seed=3), WorkDir(path, "llvm"), measurer, trials=trials,
                 batch_size=8)  # fmt: skip


def test_tune_records_and_resumes_without_remeasuring(small_conv_task, tmp_path, measurer) -> None:
    first = tuner(small_conv_task, tmp_path, 8, measurer).run()[0]
    assert first.trials == 8 and first.statuses["ok"] == 8 and first.gflops > 0
    journal = [json.loads(line) for line in (tmp_path / "measurements.jsonl").read_text().splitlines()]
    assert len(journal) == 8 and all(entry["status"] == "ok" for entry in journal)

    second = tuner(small_conv_task, tmp_path, 16, measurer).run()[0]
    assert second.resumed == 8 and second.trials == 16
    journal = [json.loads(line) for line in (tmp_path / "measurements.jsonl").read_text().splitlines()]
    assert len(journal) == 16 and len({entry["key"] for entry in journal}) == 16
    assert second.best_seconds <= first.best_seconds

    done = tuner(small_conv_task, tmp_path, 16, measurer).run()[0]  # budget already spent: nothing new
    assert done.trials == 16 and done.resumed == 16
    assert len((tmp_path / "measurements.jsonl").read_text().splitlines()) == 16


def test_truncated_last_line_is_set_aside(tmp_path) -> None:
    path = tmp_path / "measurements.jsonl"
    path.write_text('{"a": 1}\n{"b": 2}\n{"c": ')
    assert set_aside_corrupt_lines(path) == 1
    assert path.read_text() == '{"a": 1}\n{"b": 2}\n'
    assert (tmp_path / "measurements.jsonl.corrupt").read_text() == '{"c": \n'
    assert set_aside_corrupt_lines(path) == 0


def test_corrupt_middle_line_is_set_aside_and_the_rest_resumes(small_conv_task, tmp_path, measurer) -> None:
    tuner(small_conv_task, tmp_path, 8, measurer).run()
    journal = tmp_path / "measurements.jsonl"
    lines = journal.read_text().splitlines(keepends=True)
    lines[3] = "\x00\x00garbage{\n"
    journal.write_text("".join(lines))
    with pytest.warns(RlcompileWarning, match="1 damaged line"):
        again = tuner(small_conv_task, tmp_path, 8, measurer)
    state = again.run()[0]
    assert state.resumed == 7 and state.trials == 8  # the damaged one is measured again, nothing else
    keys = [json.loads(line)["key"] for line in journal.read_text().splitlines()]
    assert len(keys) == 8 and len(set(keys)) == 8
    assert "garbage" in (tmp_path / "measurements.jsonl.corrupt").read_text()


def test_resume_on_another_target_is_refused(tmp_path) -> None:
    WorkDir(tmp_path, "llvm")
    environment = json.loads((tmp_path / "environment.json").read_text())
    environment["cpu"] = "Some Other CPU"
    (tmp_path / "environment.json").write_text(json.dumps(environment))
    with pytest.raises(RlcompileError, match="cpu='Some Other CPU'"):
        WorkDir(tmp_path, "llvm")


def test_resume_on_a_cpu_of_the_same_name_but_other_extensions_is_refused(tmp_path) -> None:
    WorkDir(tmp_path, "llvm")
    environment = json.loads((tmp_path / "environment.json").read_text())
    older = {key: value for key, value in environment.items() if key != "cpu_signature"}
    (tmp_path / "environment.json").write_text(json.dumps(older))
    WorkDir(tmp_path, "llvm")  # made before signatures were recorded: the name alone is compared
    environment["cpu_signature"] = "AuthenticAMD 26/2/0 avx512f avx2 fma avx"
    (tmp_path / "environment.json").write_text(json.dumps(environment))
    with pytest.raises(RlcompileError, match="avx512f"):
        WorkDir(tmp_path, "llvm")


def test_a_task_whose_design_space_cannot_be_built_is_skipped_and_the_rest_tuned(
    unreplayable_task_model, tmp_path, measurer
):
    from rlcompile.kernel.tasks import extract_tasks
    from rlcompile.models import load_model
    from rlcompile.tvm_bridge import resolve_target

    tasks = extract_tasks(load_model(str(unreplayable_task_model)), resolve_target("llvm"))
    states = Tuner(tasks, lambda: strategies.create("random", seed=0), WorkDir(tmp_path, "llvm"),
                   measurer, trials=8 * len(tasks), batch_size=8).run()  # fmt: skip
    skipped = [state for state in states if state.skipped]
    assert len(skipped) == 1 and "where" in skipped[0].task.name and "reverse-compute-at" in skipped[0].skipped
    assert skipped[0].trials == 0 and skipped[0].summary()["skipped"] == skipped[0].skipped
    assert all(state.valid for state in states if not state.skipped)  # every other task was tuned
    assert len(states) > 1
