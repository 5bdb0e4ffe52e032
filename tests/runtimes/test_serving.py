"""Serving configurations: the small search over each runtime's knobs, and pools that several threads call at once."""

from __future__ import annotations

import threading

import numpy as np
import onnx
import pytest

from rlcompile.errors import RlcompileError
from rlcompile.runtimes.ort import run_proto
from rlcompile.runtimes.serving import Pool, Serving, distinct_servers, servers, serving_candidates
from rlcompile.verify import compare_outputs


def test_the_candidates_split_the_cores_between_requests_in_flight() -> None:
    ort = serving_candidates("ort", concurrency=4, cores=8)
    assert [(s.sessions, s.threads, s.spinning) for s in ort] == [
        (1, 8, True), (2, 4, True), (4, 2, True), (1, 8, False), (2, 4, False)]  # a session per caller: no peer
    assert [(s.sessions, s.threads, s.spinning) for s in serving_candidates("ort", 2, cores=2)] == [
        (1, 2, True), (2, 1, True), (1, 2, False)]
    assert [(s.sessions, s.threads) for s in serving_candidates("ort", 1, cores=2)] == [(1, 2)]  # alone: spinning free
    openvino = serving_candidates("openvino", 2, cores=2)
    assert [(s.hint, s.streams) for s in openvino] == [("LATENCY", None), ("THROUGHPUT", None), ("THROUGHPUT", 2)]


def test_a_configuration_round_trips_and_refuses_nonsense() -> None:
    serving = Serving("openvino", hint="THROUGHPUT", streams=2, precision="bf16")
    assert Serving.from_json(serving.to_json()) == serving
    assert serving.openvino_config()["NUM_STREAMS"] == 2
    quiet = Serving("ort", 1, 2, spinning=False)
    assert Serving.from_json(quiet.to_json()) == quiet and quiet.session_config() == {
        "session.intra_op.allow_spinning": "0"}
    assert Serving("ort", 1, 2).session_config() == {}
    with pytest.raises(RlcompileError):
        Serving("tvm")
    with pytest.raises(RlcompileError):
        Serving("openvino", hint="FAST")


@pytest.mark.parametrize("serving", [Serving("ort", 2, 1), Serving("ort", 1, 2, spinning=False),
                                     Serving("openvino", hint="THROUGHPUT")],
                         ids=["ort 2 sessions", "ort no spinning", "openvino throughput"])  # fmt: skip
def test_a_pool_answers_threads_calling_at_once(serving: Serving, static_matmul_model) -> None:
    model = onnx.load(str(static_matmul_model))
    rng = np.random.default_rng(0)
    feeds = [{"x": rng.standard_normal((2, 16)).astype(np.float32)} for _ in range(4)]
    expected = [run_proto(model, one) for one in feeds]
    pool, found = Pool(serving, model, 4), [None] * 4

    def ask(index: int) -> None:
        for _ in range(20):
            found[index] = pool.run(feeds[index])

    threads = [threading.Thread(target=ask, args=(index,)) for index in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(compare_outputs(want, got).within() for want, got in zip(expected, found, strict=True))
    assert len(servers(serving, model, feeds[0], 3)) == 3


def test_configurations_the_runtime_resolves_alike_are_served_once(static_matmul_model) -> None:
    model = onnx.load(str(static_matmul_model))
    feeds = {"x": np.ones((2, 16), np.float32)}
    hinted = Serving("openvino", hint="THROUGHPUT")
    kept = distinct_servers([hinted, Serving("ort", 1, 2), hinted, Serving("openvino")], model, feeds, 2)
    assert [serving for serving, _ in kept] == [hinted, Serving("ort", 1, 2), Serving("openvino")]
    assert all(len(callers) == 2 for _, callers in kept)
