"""The contest every decision goes through: turns, twins as the noise, keep rules, ties to the simplest."""

from __future__ import annotations

import threading
import time

import pytest

from rlcompile.measure import (
    PLAN_RULE,
    REWRITE_RULE,
    Contender,
    KeepRule,
    MeasureConfig,
    Settle,
    contest,
    run_contest,
    summarize,
)
from rlcompile.measure.contest import WIND_DOWN_CAP, Standings, beats, fastest, paired_medians, tally, wind_down

QUICK_TURNS = MeasureConfig(warmup=1, min_repeats=5, min_time_s=0.02, max_time_s=1.0)


@pytest.fixture(autouse=True)
def no_block_timed_again(monkeypatch):
    """These tests count calls, blocks and rounds: a block timed again because this machine's hypervisor took its
    time (real on a shared VM, and tested on its own in ``test_load.py``) would shift them."""
    monkeypatch.setattr(contest, "RETIMES", 0)


def sleeper(ms: float):
    return lambda: time.sleep(ms / 1e3)


def standings(medians: dict[str, float], twins: dict[str, str] | None = None,
              simplicity: dict[str, float] | None = None) -> Standings:  # fmt: skip
    return Standings({label: summarize([ms]) for label, ms in medians.items()}, twins or {}, simplicity or {})


def test_a_real_contest_ranks_by_median_and_measures_the_twins_spread():
    result = run_contest([Contender("slow", sleeper(4)), Contender("fast", sleeper(1)),
                          Contender("fast twin", sleeper(1), twin_of="fast")], QUICK_TURNS, rounds=3)  # fmt: skip
    assert result.winner(KeepRule()) == "fast"  # the twin is not a contender for the win
    assert result.beats("fast", "slow", REWRITE_RULE)
    assert not result.beats("slow", "fast", REWRITE_RULE)
    assert result.noise is not None and result.noise < 0.5
    assert all(result[label].repeats >= 3 * QUICK_TURNS.min_repeats for label in ("slow", "fast", "fast twin"))


def test_a_challenger_must_beat_both_the_noise_and_the_minimum_gain():
    rule = KeepRule(min_gain=0.01)
    assert beats(10.0, 9.0, noise=0.05, rule=rule)  # 10% faster, noise 5%
    assert not beats(10.0, 9.6, noise=0.05, rule=rule)  # 4% faster: within the noise
    assert not beats(10.0, 9.95, noise=0.0, rule=rule)  # 0.5% faster: below the minimum gain
    noisy = standings({"original": 10.0, "rewritten": 9.6, "twin": 10.5}, twins={"twin": "original"})
    assert noisy.noise == pytest.approx(0.05)
    assert not noisy.beats("rewritten", "original", rule)


def test_ties_within_the_band_go_to_the_simplest_contender():
    result = standings({"mixed": 10.0, "single": 10.15, "slow": 12.0}, simplicity={"mixed": 3, "single": 1})
    assert result.winner(PLAN_RULE) == "single"  # 1.5% slower, one segment instead of three
    assert result.winner(KeepRule()) == "mixed"  # no tie band: the fastest
    assert fastest([("a", 10.0, 2), ("b", 10.5, 1)], PLAN_RULE) == "a"  # 5% is not a tie


def test_contender_labels_must_be_unique():
    with pytest.raises(ValueError, match="unique"):
        run_contest([Contender("a", sleeper(0)), Contender("a", sleeper(0))], QUICK_TURNS, rounds=1)


def slow_at_first(ms: float, slow_ms: float, slow_calls: int):
    """A call that takes ``slow_ms`` for its first ``slow_calls`` calls, then ``ms``: a twin in a slow spell."""
    calls = [0]

    def call():
        calls[0] += 1
        time.sleep((slow_ms if calls[0] <= slow_calls else ms) / 1e3)

    return call


BLOCKS = MeasureConfig(warmup=0, min_repeats=3, min_time_s=0.0, max_time_s=1.0)


def test_a_settling_contest_adds_rounds_until_the_twins_agree():
    # the twin's first 10 calls are slow: after 5 rounds (15 samples) its median is the slow one, after a second
    # batch of 5 rounds (30 samples) it is not (10 ms sleeps: a loaded machine oversleeps 2 ms ones by ~20%)
    contenders = [Contender("original", sleeper(10)), Contender("twin", slow_at_first(10, 20, 10),
                                                                twin_of="original")]  # fmt: skip
    settled = run_contest(contenders, BLOCKS, rounds=5, settle=Settle(target=0.2))
    assert settled.rounds == 10
    assert settled.noise < 0.2
    assert settled["twin"].repeats == 30


def test_a_contest_settles_no_further_than_its_batches_and_its_deadline():
    always_slow = [Contender("original", sleeper(1)), Contender("twin", sleeper(3), twin_of="original")]
    assert run_contest(always_slow, BLOCKS, rounds=2, settle=Settle(max_batches=3)).rounds == 6
    past = Settle(deadline=time.monotonic())
    assert run_contest(always_slow, BLOCKS, rounds=5, settle=past).rounds == 2  # MIN_ROUNDS, then it stops
    without_twins = [Contender("a", sleeper(1)), Contender("b", sleeper(3))]
    assert run_contest(without_twins, BLOCKS, rounds=2, settle=Settle()).rounds == 2


def test_settling_batches_time_only_the_contenders_still_in_contention():
    contenders = [Contender("original", sleeper(2)), Contender("twin", slow_at_first(2, 4, 10), twin_of="original"),
                  Contender("close", sleeper(2.05)), Contender("far behind", sleeper(6))]  # fmt: skip
    settled = run_contest(contenders, BLOCKS, rounds=5, settle=Settle(target=0.2))
    assert settled.rounds >= 10  # 10 unless a hiccup of the machine kept the twins apart for another batch
    assert settled["close"].repeats == settled["original"].repeats == 3 * settled.rounds
    assert settled["far behind"].repeats == 15  # the first batch only: 3x the fastest, out of contention


def test_a_contest_that_settles_everyone_times_every_contender_while_a_batch_of_all_of_them_fits():
    contenders = [Contender("original", sleeper(2)), Contender("twin", slow_at_first(2, 4, 10), twin_of="original"),
                  Contender("close", sleeper(2.05)), Contender("far behind", sleeper(6))]  # fmt: skip
    settled = run_contest(contenders, BLOCKS, rounds=5, settle=Settle(target=0.2, everyone=True))
    assert settled.rounds >= 10
    assert settled["far behind"].repeats == settled["original"].repeats == 3 * settled.rounds
    assert sorted(settled.round_ms["far behind"]) == list(range(settled.rounds))


def test_a_contest_that_settles_everyone_times_only_the_close_ones_when_just_they_fit():
    # the first batch: 5 rounds of 3 calls, 0.9 s far behind and 0.03 s each of the others; 0.5 s are left then,
    # enough for the close ones' batches but not for one of everyone
    contenders = [Contender("original", sleeper(2)), Contender("twin", sleeper(3), twin_of="original"),
                  Contender("far behind", sleeper(60))]  # fmt: skip
    settle = Settle(target=0.2, everyone=True, deadline=time.monotonic() + 1.5)
    settled = run_contest(contenders, BLOCKS, rounds=5, settle=settle)
    assert settled.rounds > 5 and settled["far behind"].repeats == 15
    assert settled["original"].repeats == 3 * settled.rounds


def test_a_contest_that_settles_everyone_times_only_the_close_ones_while_its_twins_stay_beyond_noisy():
    """Twins 50% apart (beyond ``noisy``): the settling batches go to the decision, not to the plan far behind."""
    contenders = [Contender("original", sleeper(2)), Contender("twin", sleeper(3), twin_of="original"),
                  Contender("far behind", sleeper(6))]  # fmt: skip
    settle = Settle(target=0.2, max_batches=2, everyone=True, noisy=0.03)
    settled = run_contest(contenders, BLOCKS, rounds=5, settle=settle)
    assert settled.rounds == 10 and settled["far behind"].repeats == 15 and settled["original"].repeats == 30


def test_a_contest_with_a_least_number_of_batches_times_everyone_that_often_though_the_twins_agree():
    """Twins that agree from the first batch settle no contest, but ``min_batches`` still times every contender in
    that many batches (each contender's median, not only the twins', from more of the machine's states); a batch
    that does not fit before the deadline is not started."""
    contenders = [Contender("original", sleeper(2)), Contender("twin", sleeper(2), twin_of="original"),
                  Contender("far behind", sleeper(6))]  # fmt: skip
    assert run_contest(contenders, BLOCKS, rounds=2, settle=Settle(target=0.5)).rounds == 2
    settled = run_contest(contenders, BLOCKS, rounds=2, settle=Settle(target=0.5, min_batches=3))
    assert settled.rounds == 6
    assert settled["far behind"].repeats == settled["original"].repeats == 3 * 6
    late = Settle(target=0.5, min_batches=3, deadline=time.monotonic())
    assert run_contest(contenders, BLOCKS, rounds=2, settle=late).rounds == 2


def test_a_contender_whose_blocks_disagree_gets_another_batch_beside_the_twins_and_no_one_else():
    """Its first block runs 3x slower than the rest (a plan in a slow state of the machine for one block): with
    ``spread``, another batch times it and the twins it is judged beside; a steady contender keeps one batch, and a
    batch that does not fit before the deadline is not started."""
    import math

    def contenders() -> list[Contender]:
        return [Contender("original", sleeper(2)), Contender("twin", sleeper(2), twin_of="original"),
                Contender("steady", sleeper(4)), Contender("bimodal", slow_at_first(2, 6, 3))]  # fmt: skip

    settle = Settle(target=math.inf, max_batches=2, spread=0.3)
    settled = run_contest(contenders(), BLOCKS, rounds=5, settle=settle)
    assert settled.rounds == 10
    assert settled["bimodal"].repeats == settled["original"].repeats == settled["twin"].repeats == 30
    assert settled["steady"].repeats == 15
    assert sorted(settled.round_ms["bimodal"]) == list(range(10))
    assert settled["bimodal"].median_ms < 3  # the slow block is 3 of 30 calls now
    late = run_contest(contenders(), BLOCKS, rounds=5, settle=Settle(target=math.inf, max_batches=2, spread=0.3,
                                                                   deadline=time.monotonic()))  # fmt: skip
    assert late.rounds == 2 and late["bimodal"].repeats == 6  # MIN_ROUNDS (its first block slow), then no batch
    assert run_contest(contenders(), BLOCKS, rounds=5, settle=Settle(target=math.inf)).rounds == 5  # no spread


def test_a_contest_fitted_to_a_deadline_times_a_slow_model_once_per_block():
    from rlcompile.measure.contest import fit_within

    fitted = fit_within(MeasureConfig(), contenders=3, seconds=1.0)  # DEFAULT: 10 calls and 1 s per block
    calls = [0]

    def slow():
        calls[0] += 1
        time.sleep(0.3)  # slower than the fitted block

    standings = run_contest([Contender("slow", slow)], fitted, rounds=2)
    assert standings["slow"].repeats == 2 and calls[0] == 4  # per block: one warm-up call and one timed call


def test_a_fitted_contest_shortens_its_blocks_down_to_its_timings_floor():
    from dataclasses import replace

    from rlcompile.cli.common import with_min_time
    from rlcompile.measure import QUICK
    from rlcompile.measure.contest import fit_within

    assert fit_within(MeasureConfig(), contenders=3, seconds=0.0).min_time_s == MeasureConfig().floor_time_s == 0.25
    assert fit_within(QUICK, contenders=3, seconds=0.0).min_time_s == 0.25  # --quick's 0.1 s lengthened to the floor
    fine = replace(QUICK, min_time_s=0.02, floor_time_s=0.02)
    assert fit_within(fine, contenders=3, seconds=0.0).min_time_s == 0.02
    assert fit_within(fine, contenders=3, seconds=100.0).min_time_s == 0.02  # never longer than asked
    assert with_min_time(QUICK, 0.02).floor_time_s == 0.02 and with_min_time(QUICK, 2.0).floor_time_s == 0.25


def test_the_floor_of_a_contest_past_its_deadline_is_what_it_takes():
    """Past its deadline a fitted contest still runs MIN_ROUNDS rounds of a warm-up call and a floor block each:
    what a stage reserves for it (floor_seconds) is what it takes."""
    from rlcompile.measure.contest import MIN_ROUNDS, Settle, fit_within, floor_seconds, spread_over

    calls = [0]

    def model():
        calls[0] += 1
        time.sleep(0.02)

    fitted = spread_over(fit_within(MeasureConfig(), contenders=3, seconds=0.0), 5)
    started = time.monotonic()
    standings = run_contest([Contender(name, model) for name in "abc"], fitted, rounds=5,
                            settle=Settle(deadline=started))  # fmt: skip
    took = time.monotonic() - started
    floor = floor_seconds([0.02] * 3, rounds=5)
    assert standings.rounds == MIN_ROUNDS
    assert calls[0] == 3 * MIN_ROUNDS * 6 and floor == pytest.approx(3 * MIN_ROUNDS * 6 * 0.02)  # warm-up + 5
    assert floor <= took < 1.5 * floor


def spin_in_a_thread(seconds: float) -> threading.Thread:
    """A thread that keeps a core busy for ``seconds``, as a library's workers spin on after a call."""

    def spin() -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            pass

    thread = threading.Thread(target=spin, daemon=True)
    thread.start()
    return thread


def test_the_contest_waits_while_a_contenders_threads_spin_on_so_that_the_next_one_is_not_slowed():
    """A spinning ONNX Runtime session slows whoever runs next for tens of ms, as long as its CPU makes it spin:
    the contest waits until the process is idle, here longer than the runner's expected 20 ms."""
    after: list[float] = []
    spinners: list[threading.Thread] = []

    def spinner():
        spinners.append(spin_in_a_thread(0.04))

    def follower():
        after.append(0.0 if all(not thread.is_alive() for thread in spinners) else 1.0)
        time.sleep(0.001)

    single = MeasureConfig(warmup=0, min_repeats=1, min_time_s=0.0, max_time_s=1.0, floor_repeats=1)
    run_contest([Contender("spins", spinner, wind_down_s=0.02), Contender("next", follower)], single, rounds=6)
    assert after and sum(after) == 0  # no call of "next" ran while a spinner still spun


def test_a_wind_down_ends_when_the_process_is_idle_and_at_its_cap_when_it_never_is():
    assert wind_down(0.2) < 0.05  # nothing spins: two quiet slices
    spinning = spin_in_a_thread(0.5)
    waited = wind_down(0.02)
    assert WIND_DOWN_CAP * 0.02 <= waited < 0.2 and spinning.is_alive()
    spinning.join()


def test_the_standings_keep_each_contenders_block_by_round_numbered_across_settling_batches():
    contenders = [Contender("original", sleeper(10)), Contender("twin", slow_at_first(10, 20, 10), twin_of="original"),
                  Contender("far behind", sleeper(30))]  # fmt: skip
    settled = run_contest(contenders, BLOCKS, rounds=5, settle=Settle(target=0.2))
    assert sorted(settled.round_ms["original"]) == list(range(10))
    assert sorted(settled.round_ms["far behind"]) == list(range(5))  # out of contention after the first batch
    twin = settled.round_ms["twin"]
    assert twin[0] > 15 and twin[9] < 15  # its first calls were slow: the blocks say which rounds
    assert all(25 < ms < 45 for ms in settled.round_ms["far behind"].values())


def test_a_contest_still_noisy_after_its_batches_goes_on_with_longer_blocks():
    """Twins that stay 3x apart: past ``max_batches`` the contest adds ``noisy_batches`` more, each with blocks twice
    as long as the last (up to ``longest_s``), so each contender gets more calls per block."""
    always_apart = [Contender("original", sleeper(1)), Contender("twin", sleeper(3), twin_of="original")]
    timing = MeasureConfig(warmup=0, min_repeats=1, min_time_s=0.004, max_time_s=1.0)
    settle = Settle(max_batches=1, noisy=0.03, noisy_batches=2, grow=2.0, longest_s=0.012)
    result = run_contest(always_apart, timing, rounds=2, settle=settle)
    assert result.rounds == 6  # 1 batch, then 2 noisy ones
    per_block = [result["original"].repeats]
    assert settle.lengthened(timing, 1).min_time_s == pytest.approx(0.008)
    assert settle.lengthened(timing, 2).min_time_s == pytest.approx(0.012)  # capped at longest_s
    assert settle.lengthened(timing, 0) == timing  # the first batch keeps its blocks
    # ~4 calls per block in the first batch, ~8 and ~12 after: 2 * (4 + 8 + 12) = 48, far more than 6 * 4
    assert per_block[0] > 6 * 4 * 1.3
    quiet = [Contender("original", sleeper(1)), Contender("twin", sleeper(1), twin_of="original")]
    assert run_contest(quiet, timing, rounds=2, settle=settle).rounds <= 4  # settled: no noisy batches needed


def test_contenders_are_judged_round_by_round_so_a_spell_that_falls_unevenly_does_not_decide():
    """A slow spell (1.6x) covers rounds 0-1 for everyone and round 2 for the plan alone: pooled, the plan is 1.6x
    the native; round by round it ties, and the twins, slowed alike, agree."""
    slow, fast = 5.6, 3.5
    blocks = {"native": [slow, slow, fast, fast, fast], "twin": [slow, slow, fast, fast, fast],
              "plan": [slow, slow, slow, fast, fast]}  # fmt: skip
    contenders = [Contender("twin", sleeper(0), twin_of="native"), Contender("native", sleeper(0)),
                  Contender("plan", sleeper(0))]  # fmt: skip
    samples = [list(blocks[c.label]) for c in contenders]
    by_round = [dict(enumerate(blocks[c.label])) for c in contenders]
    judged = tally(contenders, samples, 5, by_round)
    assert judged["plan"].pooled_median_ms == pytest.approx(slow)
    assert judged.median("plan") == pytest.approx(fast)  # the native's median times the median ratio, 1.0
    assert judged["native"].pooled_median_ms is None  # the reference keeps its own median
    assert judged.noise == pytest.approx(0.0)
    assert not judged.beats("native", "plan", PLAN_RULE)
    # a contender never timed in a round beside the reference keeps its pooled median
    alone = paired_medians({"a": summarize([2.0]), "b": summarize([4.0])}, {"a": {0: 2.0}, "b": {1: 4.0}}, "a")
    assert alone["b"].median_ms == 4.0 and alone["b"].pooled_median_ms is None


def test_every_median_is_judged_against_the_faster_native_and_each_twin_pair_against_its_own_original():
    """Judged through ORT's blocks (noisy on their own), a plan identical round by round to OpenVINO native would
    seem 1.7% slower, and a twin of it 1.7% apart; against OpenVINO, the faster native, both are exact."""
    blocks = {"ort": [10, 12, 11, 12, 10], "ort twin": [10, 12, 11, 12, 10], "openvino": [6, 6, 6, 6, 6],
              "openvino twin": [5.9, 6.1, 6.1, 5.9, 6.0], "plan": [5.9, 6.1, 6.1, 5.9, 6.0]}  # fmt: skip
    contenders = [Contender("ort twin", sleeper(0), twin_of="ort"), Contender("ort", sleeper(0)),
                  Contender("openvino twin", sleeper(0), twin_of="openvino"), Contender("openvino", sleeper(0)),
                  Contender("plan", sleeper(0))]  # fmt: skip
    samples = [list(blocks[c.label]) for c in contenders]
    by_round = [dict(enumerate(blocks[c.label])) for c in contenders]
    judged = tally(contenders, samples, 5, by_round)
    assert judged["openvino"].pooled_median_ms is None  # the yardstick keeps its own median
    assert judged.median("plan") == pytest.approx(6.0) and judged.ratio("plan", "openvino") == pytest.approx(1.0)
    assert judged.noise == pytest.approx(0.0)
    through_ort = paired_medians({c.label: summarize(blocks[c.label]) for c in contenders},
                                 {c.label: dict(enumerate(blocks[c.label])) for c in contenders}, "ort")  # fmt: skip
    assert through_ort["plan"].median_ms / through_ort["openvino"].median_ms == pytest.approx(1.0167, abs=1e-3)
