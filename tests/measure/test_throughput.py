"""Throughput contests: requests in flight served by threads, rates judged round by round, twins as the noise."""

from __future__ import annotations

import time

import pytest

from rlcompile.measure.throughput import Server, serve_block, throughput_contest


def sleeper(seconds: float):
    return lambda: time.sleep(seconds)


def test_a_block_serves_every_caller_at_once() -> None:
    count, latencies, elapsed = serve_block([sleeper(0.01)] * 4, 0.2)
    assert count == len(latencies) and 0.2 <= elapsed < 0.4
    assert count >= 4 * 15  # four in flight, ~20 each: concurrent, not one after the other
    assert min(latencies) >= 10.0


def test_more_requests_in_flight_of_a_waiting_call_complete_more_per_second() -> None:
    one, two = Server("one", (sleeper(0.005),)), Server("two", (sleeper(0.005),) * 2)
    twin = Server("two again", (sleeper(0.005),) * 2, twin_of="two")
    standings = throughput_contest([one, two, twin], block_s=0.15, rounds=3)
    assert standings["two"].per_s == pytest.approx(2 * standings["one"].per_s, rel=0.25)
    assert standings.best(["one", "two"]) == "two"
    assert standings["one"].p99_ms >= standings["one"].p50_ms >= 5.0
    assert standings.noise is not None and standings.noise < 0.25


def test_a_failing_caller_fails_the_block() -> None:
    def broken() -> None:
        raise RuntimeError("model refused the input")

    with pytest.raises(RuntimeError, match="refused"):
        serve_block([broken, sleeper(0.001)], 0.05)


def test_rounds_go_on_while_the_twins_differ_by_more_than_the_target() -> None:
    first = Server("first", (sleeper(0.002),))
    unlike = Server("first again", (sleeper(0.004),), twin_of="first")  # half the rate: twins far apart
    standings = throughput_contest([first, unlike], block_s=0.05, rounds=2, noise_target=0.03, max_rounds=5)
    assert standings["first"].rounds == 5 and standings.noise > 0.03
    settled = throughput_contest([first, unlike], block_s=0.05, rounds=2, noise_target=0.9, max_rounds=5)
    assert settled["first"].rounds == 2
