"""``optimize --objective throughput``: plans paired with their runtime's serving knobs, the pair that serves the most
requests per second kept, recorded, served by ``load(...).serve()`` and exported with its settings."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import rlcompile
from rlcompile.export import TARGET_RUNTIME, export_plan
from rlcompile.optimize import OptimizeRequest, StageSettings, optimize
from rlcompile.verify import compare_outputs
from tests.timing import BLOCKS

SETTINGS = StageSettings(threads=2, libraries="ort,openvino", timing=BLOCKS, objective="throughput", concurrency=2)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    output = tmp_path_factory.mktemp("serving") / "plan"
    return optimize(OptimizeRequest("lenet5", output, budget_s=35.0, levels=("layer",), settings=SETTINGS)), output


def test_the_pair_that_served_the_most_per_second_is_kept_and_recorded(served) -> None:
    result, _ = served
    serving = result.manifest.serving
    rates = {label: stats["per_s"] for label, stats in serving["servers"].items() if "(identical)" not in label}
    assert serving["kept"] == max(rates, key=rates.get) and serving["concurrency"] == 2
    untouched = [label for label in rates if label.startswith("untouched")]
    assert any(": ort 2 sessions x 1 thread" in label for label in untouched)
    assert any(": openvino throughput" in label for label in untouched)
    assert serving["noise"] is not None and serving["p99_ms"] >= serving["p50_ms"] > 0


def test_the_plan_serves_threads_as_measured(served) -> None:
    result, output = served
    plan = rlcompile.load(output)
    pool = plan.serve()
    assert pool.serving.to_json() == result.manifest.serving["serving"] and pool.concurrency == 2
    feeds = plan.reference_inputs
    assert compare_outputs(plan.run(feeds), pool.run(feeds)).within()


def test_the_export_serves_its_requests_in_flight_at_the_recorded_settings(served, tmp_path: Path) -> None:
    result, output = served
    target = {runtime: name for name, runtime in TARGET_RUNTIME.items()}[result.manifest.serving["serving"]["runtime"]]
    exported = export_plan(output, target, tmp_path / "exported", BLOCKS)
    assert exported.check.agreement.within()
    check = exported.check
    assert check.export_per_s > 0 and check.plan_per_s > 0 and check.serving_noise >= 0
    assert check.serves_slower == (check.serving_ratio < 1 - check.serving_noise)
    assert "threads" in (tmp_path / "exported" / "README.md").read_text()


def test_latency_stays_the_default_and_out_of_the_run_key() -> None:
    described = StageSettings().describe()
    assert "objective" not in described and "concurrency" not in described
    assert SETTINGS.describe()["objective"] == "throughput"
    assert np.isfinite(SETTINGS.describe()["concurrency"])


def test_run_serves_the_plan_beside_the_natives_configurations(served, tmp_path: Path) -> None:
    import json

    from rlcompile.cli import main
    from rlcompile.saved import PLAN_SERVER

    _, output = served
    assert main(["run", str(output), "--objective", "throughput", "--quick", "--json", str(tmp_path / "r.json")]) == 0
    measured = json.loads((tmp_path / "r.json").read_text())
    servers = measured["servers"]
    assert PLAN_SERVER in servers and measured["noise"] is not None
    assert {"ort native: 1 session x 2 threads", "openvino native: throughput"} <= set(servers)
    assert all(stats["per_s"] > 0 for stats in servers.values())
