"""Faults injected for real: kill -9 in the middle of each long command, a second process on the same
directory, a full disk. After each, the same command again resumes, loses no finished measurement,
never counts one twice, and ends like an uninterrupted run.

The commands run as users run them, in their own process group, and the whole group is killed with
SIGKILL (build workers included) at a random moment after the command has recorded something. A full
disk is simulated with ``ulimit -f`` at the journal's size (no tmpfs, no root needed): the command then
gets EFBIG on the first byte the journal would grow by.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

RLCOMPILE = [sys.executable, "-m", "rlcompile.cli"]


def start(*args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([*RLCOMPILE, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env=env)  # fmt: skip


def wait_for(condition: Callable[[], bool], process: subprocess.Popen, timeout_s: float = 240.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if process.poll() is not None:
            raise AssertionError(f"the command ended before the fault: {process.communicate()}")
        if time.monotonic() > deadline:
            os.killpg(process.pid, signal.SIGKILL)
            raise AssertionError("the command recorded nothing in time")
        time.sleep(0.2)


def kill_at_random_moment(process: subprocess.Popen, seed: int, at_most_s: float = 2.0) -> None:
    time.sleep(random.Random(seed).uniform(0, at_most_s))
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def finish(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*RLCOMPILE, *args], capture_output=True, text=True, timeout=600, check=False)


def journal_lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_tune_killed_resumes_without_loss_or_double_count_refuses_a_second_process_and_a_full_disk(tmp_path: Path):
    work = tmp_path / "work"
    journal = work / "measurements.jsonl"
    command = ["tune", "lenet5", "--agent", "random", "--trials", "24", "--batch-size", "4", "--seed", "5",
               "--work-dir", str(work)]  # fmt: skip
    first = start(*command)
    wait_for(lambda: len(journal_lines(journal)) >= 4, first)
    # the first process is stopped (SIGSTOP) while a second one tries the same work directory: it still holds the
    # directory then, however fast this machine measures the rest of its batches
    os.killpg(first.pid, signal.SIGSTOP)
    try:
        second = finish(*command)
    finally:
        os.killpg(first.pid, signal.SIGCONT)
    assert second.returncode == 2 and "in use by another rlcompile process" in second.stderr
    assert second.stderr.strip().count("\n") == 0
    kill_at_random_moment(first, seed=1, at_most_s=1.0)
    before = [line for line in journal_lines(journal) if line.strip()]
    resumed = finish(*command)
    assert resumed.returncode == 0, resumed.stderr
    after = journal_lines(journal)
    kept = [line for line in before if line.endswith("}")]  # a line torn by the kill is set aside
    assert after[: len(kept)] == kept  # nothing recorded was lost or rewritten
    keys = [json.loads(line)["key"] for line in after]
    assert len(keys) == len(set(keys))  # no candidate measured twice
    assert f"resumed: {len(kept)} measurements" in resumed.stderr
    print(f"tune: {len(before)} journal lines at the kill ({len(before) - len(kept)} torn), {len(after)} after the "
          f"resume, {len(keys) - len(set(keys))} measured twice")  # fmt: skip
    tasks = json.loads((work / "tune_summary.json").read_text())["tasks"]
    assert sum(task["trials"] for task in tasks) == len(keys)  # every journal line counted once
    for task in tasks:  # each task got its whole budget, unless its space had no more candidates
        assert task["trials"] == task["budget"] or (task["exhausted"] and task["trials"] < task["budget"])

    # the disk fills up: the journal cannot grow by a byte (ulimit -f at its size), the run asks for more
    size_kib = journal.stat().st_size // 1024
    more = [*command[:5], "28", *command[6:]]
    full = subprocess.run(["bash", "-c", f"ulimit -f {size_kib} && exec \"$@\"", "bash", *RLCOMPILE, *more],
                          capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    assert full.returncode == 2, full.stderr
    assert full.stderr.strip().splitlines()[-1].startswith("rlcompile: error: File too large")
    assert "Traceback" not in full.stderr
    assert journal_lines(journal) == after  # nothing recorded was lost
    print(f"full disk: exit 2, one line; journal kept its {len(after)} lines")


def test_select_killed_while_profiling_resumes_at_the_group_where_it_stopped(tmp_path: Path):
    tables, plan = tmp_path / "tables", tmp_path / "lenet5.plan"
    command = ["select", "lenet5", "--agent", "greedy", "--runtimes", "ort,torch", "--threads", "1", "--quick",
               "--table-dir", str(tables), "-o", str(plan)]  # fmt: skip
    first = start(*command)
    wait_for(lambda: any(tables.glob("*.partial")), first)
    kill_at_random_moment(first, seed=2, at_most_s=0.3)
    done_before = len(json.loads(next(tables.glob("*.partial")).read_text())["standalone"])
    resumed = finish(*command)
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming the profile: {done_before} of" in resumed.stderr
    print(f"select: {done_before} groups profiled at the kill, reused by the resumed run")
    assert (plan / "manifest.json").is_file() and not any(tables.glob("*.partial"))
    assert finish("run", str(plan), "--quick").returncode == 0


def test_graph_training_killed_mid_run_carries_on_from_its_saved_state(tmp_path: Path):
    checkpoint = tmp_path / "agent.pt"
    training = tmp_path / "agent.pt.training"
    command = ["graph", "squeezenet1_1", "--agent", "ppo", "--train-episodes", "12", "--steps", "8",
               "--checkpoint", str(checkpoint), "--quick", "--json", str(tmp_path / "g.json")]  # fmt: skip
    first = start(*command)
    wait_for(training.exists, first)
    kill_at_random_moment(first, seed=3, at_most_s=1.0)
    import torch

    episodes_before = torch.load(training, weights_only=False)["counters"]["episodes"]
    resumed = finish(*command)
    assert resumed.returncode == 0, resumed.stderr
    extra = json.loads((tmp_path / "g.json").read_text())["search"]
    assert extra["resumed_episodes"] == episodes_before and extra["train_episodes"] >= 12
    print(f"graph: {episodes_before} PPO episodes done at the kill, {extra['train_episodes']} after the resume")
    assert checkpoint.exists()


def test_optimize_killed_in_the_kernel_stage_resumes_it(tmp_path: Path):
    output = tmp_path / "lenet5.opt"
    journal = output / "work" / "tuning" / "measurements.jsonl"
    # an ample budget, the trials bounding the work: on a 2-core VM running 2.5-5x slower than usual, a 32 s budget's
    # 18 s kernel share ended in task extraction before any candidate was measured
    # the contests in 0.02 s blocks, also when fitted to a deadline: what is checked is the resumed tuning, not how
    # finely the plans time (lenet5: 0.05 ms a call)
    command = ["optimize", "lenet5", "-o", str(output), "--levels", "kernel,layer", "--budget", "150s",
               "--trials", "16", "--runtimes", "ort,tvm", "--min-time", "0.02"]  # fmt: skip
    first = start(*command)
    # the kernel stage's first batch: a slow machine measured only 14 candidates in an 18 s share
    wait_for(lambda: len(journal_lines(journal)) >= 4, first)
    kill_at_random_moment(first, seed=4, at_most_s=1.0)
    kept = [line for line in journal_lines(journal) if line.endswith("}")]
    resumed = finish(*command)
    assert resumed.returncode == 0, resumed.stderr
    manifest = json.loads((output / "manifest.json").read_text())
    kernel = manifest["optimize"]["stages"]["kernel"]
    assert kernel["resumed_trials"] == len(kept) and kernel["trials"] >= len(kept), (kernel, resumed.stderr)
    assert journal_lines(journal)[: len(kept)] == kept
    keys = [json.loads(line)["key"] for line in journal_lines(journal)]
    assert len(keys) == len(set(keys))
    print(f"optimize: {len(kept)} kernel measurements at the kill, {len(keys)} after the resume, none twice")
