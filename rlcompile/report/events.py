"""Showing the events of every level: lines, or progress bars on a terminal.

:class:`EventLog` is the listener the CLI hands to every level. On a terminal, :class:`~rlcompile.events.Step`
events (groups profiled, trials measured) draw rich progress bars and other events print a line above
them; elsewhere (logs, CI) every event is one line. The bars are redrawn only when an event arrives
(no refresh thread): a thread taking the GIL between timed calls' native sections added milliseconds per
call to the measurements (15 -> 264 ms for a layer-by-layer plan).
"""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from rlcompile.events import Event, Failed, Step


class EventLog:
    """A listener of events: progress bars for steps on a terminal, one dim line per event otherwise.

    ``terminal_only``: print nothing when not on a terminal (short commands keep logs for results only).
    Use as a context manager so the bars are closed at the end.
    """

    def __init__(self, console: Console, terminal_only: bool = False) -> None:
        self.console = console
        self.terminal_only = terminal_only
        self.bars: Progress | None = None
        self.tasks: dict[tuple[str, str, str], int] = {}

    def __enter__(self) -> EventLog:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Stop drawing the bars (they stay on the screen as they are)."""
        if self.bars is not None:
            self.bars.stop()
            self.bars = None
            self.tasks.clear()

    def __call__(self, event: Event | str) -> None:
        style = "yellow" if isinstance(event, Failed) else "dim"  # what went wrong stands out from the progress
        if not self.console.is_terminal:
            if not self.terminal_only:
                self.console.print(f"[{style}]{event}[/{style}]", highlight=False)
            return
        if isinstance(event, Step) and event.total > 0:
            self.step(event)
            return
        (self.bars.console if self.bars else self.console).print(f"[{style}]{event}[/{style}]", highlight=False)

    def step(self, event: Step) -> None:
        if self.bars is None:
            self.bars = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), console=self.console, auto_refresh=False)  # fmt: skip
            self.bars.start()
        key = (event.stage, event.unit, event.item if event.stage == "kernel" else "")
        label = f"{event.stage}: {event.item if event.stage == 'kernel' else event.unit}"
        if key not in self.tasks:
            self.tasks[key] = self.bars.add_task(label, total=event.total)
        self.bars.update(self.tasks[key], completed=event.done, total=event.total)
        self.bars.refresh()
