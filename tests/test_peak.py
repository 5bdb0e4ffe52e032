"""The FMA peak: measured once per CPU signature and thread count, cached, and absent with a reason."""

from __future__ import annotations

import json

import pytest

from rlcompile import peak
from rlcompile.machine import cpu_signature


def test_the_peak_is_measured_once_and_read_back_from_the_cache(tmp_path, monkeypatch):
    first = peak.fma_peak(1, tmp_path)
    assert first.threads == 1 and first.isa in peak.VECTORS
    assert 1.0 < first.gflops < 10_000.0  # one core: GFLOP/s, not FLOP/s or TFLOP/s
    assert 0.1 < first.bandwidth_gbs < 10_000.0
    saved = json.loads((tmp_path / peak.CACHE_FILE).read_text())
    assert saved == {f"{cpu_signature()} | 1 threads": {"gflops": first.gflops, "bandwidth_gbs": first.bandwidth_gbs}}

    def must_not_measure(*args, **kwargs):
        raise AssertionError("measured again")

    monkeypatch.setattr(peak, "run_c", must_not_measure)
    assert peak.fma_peak(1, tmp_path) == first
    assert first.fraction(first.gflops * 1e9, 1.0) == pytest.approx(1.0)
    # the roofline: a program of one FLOP per byte is held to the bandwidth, a dense one to the peak
    assert first.attainable_gflops(1e9, 1e9) == pytest.approx(min(first.gflops, first.bandwidth_gbs))
    assert first.attainable_gflops(1e12, 1.0) == first.gflops


def test_without_a_c_compiler_there_is_no_peak_and_the_reason_is_given(tmp_path, monkeypatch):
    monkeypatch.setattr(peak.shutil, "which", lambda name: None)  # a machine without cc: cannot be caused here
    with pytest.raises(peak.PeakUnknown, match="no C compiler"):
        peak.fma_peak(1, tmp_path)
    assert not (tmp_path / peak.CACHE_FILE).exists()
