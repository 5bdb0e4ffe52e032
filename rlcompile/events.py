"""Progress as typed events: every level reports what it does to one callback, and the caller decides how
to show it (the CLI prints lines and draws progress bars; tests assert on the events themselves).

Each event names its ``stage`` (``graph``, ``kernel``, ``layer``, ``optimize``, ``compare``, ``run``) and
carries one human line, ``text``; the subclasses add what a program needs to act on it:

* :class:`Phase`: a named phase begins (``prepare``, ``measure``, ``profile``, ``solve``, ``search``...);
* :class:`Step`: countable work advanced (``done`` of ``total`` ``unit``), drawn as a progress bar;
* :class:`Decision`: a measured decision (``kept``, with the ``gain`` and the ``noise`` it was judged on);
* :class:`Noise`: how far a contest's twins stayed apart, and what else used the machine meanwhile;
* :class:`Reuse`: finished work found and reused or resumed (``done`` of ``total`` when partial).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Event:
    """Something worth telling the user while a level works."""

    stage: str
    text: str

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class Phase(Event):
    """A named phase of the stage begins."""

    phase: str = ""


@dataclass(frozen=True)
class Step(Event):
    """``done`` of ``total`` ``unit`` finished (a group profiled, a batch of trials measured)."""

    done: int = 0
    total: int = 0
    unit: str = ""
    #: what is being counted, when a stage counts several things (a task's label while tuning)
    item: str = ""


@dataclass(frozen=True)
class Decision(Event):
    """A measured decision: whether the challenger was kept, by how much it won, and the noise it beat."""

    kept: bool = False
    gain: float | None = None
    noise: float | None = None


@dataclass(frozen=True)
class Noise(Event):
    """How far a contest's identical twins stayed apart after ``rounds``, and what else used the machine meanwhile:
    the shares of the CPUs' time the hypervisor gave other guests (``steal``) and other programs used (``others``),
    ``None`` where the machine does not say."""

    noise: float = 0.0
    rounds: int = 0
    steal: float | None = None
    others: float | None = None
    #: blocks timed again because the hypervisor took their CPU time
    retimed: int = 0


@dataclass(frozen=True)
class Failed(Event):
    """``count`` of ``total`` tries failed for one ``reason`` (plans a runtime cannot compile): told once per reason."""

    count: int = 0
    total: int = 0
    reason: str = ""


@dataclass(frozen=True)
class Reuse(Event):
    """Finished work reused (a stage, a table, an output) or resumed (``done`` of ``total`` already done)."""

    what: str = ""
    done: int | None = None
    total: int | None = None


Listener = Callable[[Event], None]


def ignore(event: Event) -> None:
    """The listener of callers that want no progress."""


def note(stage: str) -> Callable[[str], Event]:
    """A maker of plain events for ``stage``: ``say = note("layer"); listener(say("..."))``."""
    return lambda text: Event(stage, text)
