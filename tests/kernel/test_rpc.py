"""Distributed measurement for real: a TVM RPC tracker and two RPC servers on loopback.

``rlcompile tune --rpc-tracker/--rpc-key`` sends every candidate to a server the tracker hands out.
Both servers must measure, and a server killed mid-run must cost no lost and no double-counted
measurement: the candidates it was running are measured again on the other one.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlcompile.cli import main
from rlcompile.kernel.measurer import is_device_failure

KEY = "rlcompile-test"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def spawn(args: list[str], log: Path) -> subprocess.Popen:
    handle = log.open("w")
    return subprocess.Popen([sys.executable, "-m", *args], stdout=handle, stderr=subprocess.STDOUT,
                            start_new_session=True)  # fmt: skip


def wait_until(condition, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("RPC setup did not come up in time")
        time.sleep(0.3)


def registered_servers(port: int) -> int:
    import tvm.rpc

    try:
        summary = tvm.rpc.connect_tracker("127.0.0.1", port).summary()
    except Exception:
        return 0
    return sum(queue.get("free", 0) for key, queue in summary.get("queue_info", {}).items() if key == KEY)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[int, dict[str, tuple[subprocess.Popen, Path]]]]:
    """A tracker and two servers registered under one key; yields (tracker port, {name: (process, log)})."""
    tracker_port = free_port()
    processes = [spawn(["tvm.exec.rpc_tracker", "--host", "127.0.0.1", "--port", str(tracker_port),
                        "--port-end", str(tracker_port + 1)], tmp_path / "tracker.log")]  # fmt: skip
    servers = {}
    for name in ("a", "b"):
        port, log = free_port(), tmp_path / f"server-{name}.log"
        server = spawn(["tvm.exec.rpc_server", "--tracker", f"127.0.0.1:{tracker_port}", "--key", KEY,
                        "--host", "127.0.0.1", "--port", str(port), "--port-end", str(port + 1)], log)  # fmt: skip
        servers[name] = (server, log)
        processes.append(server)
    try:
        wait_until(lambda: registered_servers(tracker_port) == 2)
        yield tracker_port, servers
    finally:
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def sessions(log: Path) -> int:
    return log.read_text().count("start serving")


def kill_when_serving(server: subprocess.Popen, log: Path, served: int, timeout_s: float = 300.0) -> None:
    """SIGKILL the server as soon as it starts serving a new session (a measurement in flight)."""
    deadline = time.monotonic() + timeout_s
    while sessions(log) <= served and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(server.pid, signal.SIGKILL)


def test_tuning_through_two_rpc_servers_survives_one_being_killed(cluster, tmp_path: Path, capsys) -> None:
    tracker_port, servers = cluster
    work = tmp_path / "work"
    command = ["tune", "lenet5", "--agent", "random", "--trials", "8", "--batch-size", "4", "--tasks", "0",
               "--work-dir", str(work), "--rpc-tracker", f"127.0.0.1:{tracker_port}", "--rpc-key", KEY]  # fmt: skip
    assert main(command) == 0
    journal = [json.loads(line) for line in (work / "measurements.jsonl").read_text().splitlines()]
    assert len(journal) == 8 and sum(entry["status"] == "ok" for entry in journal) >= 6
    assert sessions(servers["a"][1]) > 0 and sessions(servers["b"][1]) > 0  # both servers measured

    # one server dies while a batch is measured; its candidates go to the other one
    victim, victim_log = servers["a"]
    more = [*command[:5], "16", *command[6:]]
    served = sessions(victim_log)
    killer = threading.Thread(target=kill_when_serving, args=(victim, victim_log, served), daemon=True)
    killer.start()
    assert main(more) == 0
    killer.join(timeout=1)
    assert victim.poll() is not None  # it was killed while it measured
    journal = [json.loads(line) for line in (work / "measurements.jsonl").read_text().splitlines()]
    keys = [entry["key"] for entry in journal]
    assert len(keys) == 16 and len(set(keys)) == 16  # nothing lost, nothing measured twice
    blamed = [entry for entry in journal if entry["status"] != "ok" and is_device_failure(entry["error"] or "")]
    assert not blamed, blamed  # no candidate is blamed for the server that died: it was measured again
    assert "resumed: 8 measurements" in capsys.readouterr().err
    print(f"rpc: sessions a={sessions(servers['a'][1])} b={sessions(servers['b'][1])}; server a killed while "
          f"serving; {len(keys)} measurements, {len(keys) - len(set(keys))} twice, none blamed on it")  # fmt: skip
