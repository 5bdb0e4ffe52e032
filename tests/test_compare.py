"""Side-by-side comparison of backends in one process."""

from __future__ import annotations

import json

from rlcompile import runtimes
from rlcompile.compare import compare_backends
from rlcompile.events import Phase
from rlcompile.measure import QUICK
from rlcompile.models import load_model


def test_compare_reports_ratios_agreement_and_environment() -> None:
    model = load_model("lenet5")
    events: list[Phase] = []
    comparison = compare_backends(
        model,
        [runtimes.create("ort", opt_level="all"), runtimes.create("ort", opt_level="disable"), runtimes.create("tvm")],
        QUICK,
        progress=events.append,
    )
    reference, unoptimised, tvm = comparison.results
    assert reference.agreement is None and comparison.ratio(reference) == 1.0
    assert unoptimised.agreement.within(1e-5) and tvm.agreement.within(1e-4)
    expected_ratio = tvm.latency.median_ms / reference.latency.median_ms
    assert comparison.ratio(tvm) == expected_ratio
    assert all(r.latency.repeats >= QUICK.min_repeats for r in comparison.results)
    assert [event.phase for event in events] == ["prepare"] * 3 + ["measure"] * 3

    payload = json.loads(json.dumps(comparison.to_dict()))
    assert payload["model"] == "lenet5" and payload["inputs"] == {"input": [1, 1, 32, 32]}
    assert payload["environment"]["packages"]["apache-tvm"] == "0.27.0.post1"
    assert [r["backend"] for r in payload["results"]][2].startswith("tvm (llvm, untuned")
