"""The user's model run natively at fewer threads: screened beside its native run, judged like any plan, saved and
loaded at its own count."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

import rlcompile
from rlcompile.events import Decision, Event
from rlcompile.export import export_plan
from rlcompile.layer.selection import fewer_threads
from rlcompile.layer.selection.candidates import mark_untouched, native_twin
from rlcompile.layer.selection.deadline import FinalReserve
from rlcompile.layer.selection.fewer_threads import (
    compiled_candidate,
    fewer_thread_counts,
    fewer_threads_candidates,
    first_screens,
    screen_seconds,
)
from rlcompile.layer.selection.timing import ROUNDS
from rlcompile.measure import QUICK
from rlcompile.measure.contest import floor_seconds
from rlcompile.plan import load_plan, save_plan
from tests.layer.test_selection import selection  # noqa: F401  (the module's fixture: lenet5 at two threads)


def test_counts_halve_down_to_one_thread():
    assert fewer_thread_counts(1) == [] and first_screens(1, 2) == 0
    assert fewer_thread_counts(2) == [1] and first_screens(2, 2) == 2
    assert fewer_thread_counts(16) == [8, 4, 2, 1]
    assert fewer_thread_counts(6) == [3, 1]


def test_each_halving_is_kept_only_while_the_screen_measures_it_faster_than_the_last(selection, monkeypatch):  # noqa: F811
    ratios = {"ort": {4: 0.8, 2: 0.7, 1: 0.75}, "openvino": {4: 1.1, 2: 0.5, 1: 0.4}}
    monkeypatch.setattr(fewer_threads, "screen", lambda candidate, native, feeds: ratios[
        candidate.assignment[0]][candidate.threads])
    events: list[Event] = []
    found = fewer_threads_candidates(selection.model, selection.grouped, {"ort": None, "openvino": None}, 8,
                                     selection.reference, selection.native_calls, rewritten=False,
                                     progress=events.append)  # fmt: skip
    # ORT: 4 and 2 threads each faster than the last, 1 thread not; OpenVINO: 4 threads already slower
    assert [(c.assignment[0], c.threads) for c in found] == [("ort", 2)]
    decisions = [(e.kept, round(e.gain, 2)) for e in events if isinstance(e, Decision)]
    assert decisions == [(True, 0.2), (True, 0.3), (False, 0.25), (False, -0.1)]
    (candidate,) = found
    assert candidate.labels == ["native:ort at 2 threads"] and candidate.engine.compiled[0].threads == 2
    assert candidate.agreement.within()


def test_a_run_at_fewer_threads_is_a_plan_never_the_untouched_native_or_its_twin(selection):  # noqa: F811
    candidate = compiled_candidate(selection.model, selection.grouped, {}, "openvino", 1, selection.reference,
                                   rewritten=True, progress=lambda event: None)  # fmt: skip
    assert candidate.labels == ["native:openvino at 1 thread (original graph)"] and candidate.error is None
    assert candidate.engine.runs_whole(selection.model.native_proto)  # the very model the natives run ...
    mark_untouched([candidate], selection.model)
    assert not candidate.untouched  # ... but not as the user runs it: it must beat the natives to be kept
    assert native_twin(candidate, selection.model.native_proto, selection.natives) is None
    assert candidate.to_dict()["threads"] == 1


def test_the_screen_times_the_run_beside_its_native(selection):  # noqa: F811
    candidate = compiled_candidate(selection.model, selection.grouped, {}, "ort", 1, selection.reference,
                                   rewritten=False, progress=lambda event: None)  # fmt: skip
    ratio = fewer_threads.screen(candidate, selection.native_calls["ort native"], selection.grouped.feeds)
    assert 0.2 < ratio < 5  # LeNet-5 at one thread against two: the same order, either side of 1


def test_a_plan_at_fewer_threads_is_saved_loaded_and_exported_at_its_own_count(selection, tmp_path: Path):  # noqa: F811
    candidate = compiled_candidate(selection.model, selection.grouped, {}, "ort", 1, selection.reference,
                                   rewritten=False, progress=lambda event: None)  # fmt: skip
    candidate.measured = selection.chosen.measured
    out = save_plan(dataclasses.replace(selection, chosen=candidate), tmp_path / "plan")
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["threads"] == 2  # the count the user asked for, at which the natives are timed
    assert [segment.get("threads") for segment in manifest["segments"]] == [1]
    plan = rlcompile.load(out)
    assert [item.threads for item in plan.engine.compiled] == [1] and plan.describe().endswith("1 thread")
    assert [item.threads for item in load_plan(out, threads=2).engine.compiled] == [2]  # the caller's count
    export = export_plan(out, "onnxruntime", tmp_path / "export", QUICK)
    assert json.loads((export.output / "onnxruntime.json").read_text())["intra_op_num_threads"] == 1
    # a plan at the user's count records none per segment
    plain = json.loads((save_plan(selection, tmp_path / "plain") / "manifest.json").read_text())
    assert [segment.get("threads") for segment in plain["segments"]] == [selection.chosen.threads] * len(
        plain["segments"])


def test_the_deadline_reserves_the_runs_at_fewer_threads_compiles_screens_and_contest_turns():
    natives = ["ort native (identical session)", "ort native", "openvino native (identical session)",
               "openvino native"]  # fmt: skip
    plain = FinalReserve(0.01, len(natives), 2, whole_s=1.0)
    fewer = dataclasses.replace(plain, fewer=2)
    assert fewer.final_floor_s([], 0) == pytest.approx(floor_seconds([0.01] * (4 + 2 + 2), ROUNDS))
    assert fewer.after_probe_s([], 0.5, 0) - plain.after_probe_s([], 0.5, 0) == pytest.approx(
        fewer.final_floor_s([], 0) - plain.final_floor_s([], 0) + 2 * 1.0 + 2 * screen_seconds(0.01))
