"""Live tuning progress: a table per task on a terminal, one line per batch elsewhere (logs, CI)."""

from __future__ import annotations

from rich.console import Console
from rich.live import Live

from rlcompile.kernel.tuner import TaskState
from rlcompile.report.tables import tuning_table


class TuneProgress:
    """A tuner callback; use as a context manager around the tuning run."""

    def __init__(self, console: Console, title: str) -> None:
        self.console = console
        self.title = title
        self.states: dict[str, TaskState] = {}
        self.live = Live(console=console, refresh_per_second=2, transient=False) if console.is_terminal else None

    def __enter__(self) -> TuneProgress:
        if self.live:
            self.live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self.live:
            self.live.__exit__(*exc)

    def __call__(self, state: TaskState) -> None:
        self.states[state.task.workload_key] = state
        if self.live:
            self.live.update(tuning_table(list(self.states.values()), self.title))
            return
        best = (
            f"{state.best_seconds * 1e3:.4f} ms, {state.gflops:.1f} GFLOPS"
            if state.valid
            else "no valid candidate yet"
        )
        self.console.print(
            f"{state.task.label}: {state.trials}/{state.budget} trials, best {best}, "
            f"{state.failures} failed, search {state.strategy.stats.search_seconds:.1f} s, "
            f"measure {state.measure_seconds:.1f} s",
            highlight=False,
        )
