"""One process at a time per resumable directory.

Two runs appending to the same tuning journal or writing the same plan directory would interleave
their records; the second is refused with one line instead. The lock is ``fcntl.flock`` on a ``.lock``
file inside the directory, so the kernel drops it when the holder exits, however it exits (kill -9
included): a stale lock file never blocks a resume. Within one process the lock is re-entrant, so a
stage may lock a directory that the pipeline around it already holds.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rlcompile.errors import RlcompileError

LOCK_NAME = ".lock"
#: directory (resolved) -> [file descriptor, depth] for the locks this process holds.
_held: dict[Path, list[int]] = {}


class LockedError(RlcompileError):
    """Another process is working in the directory."""


@contextmanager
def exclusive(directory: Path, what: str = "directory") -> Iterator[None]:
    """Hold ``directory``'s lock for the block; refuse with :class:`LockedError` if another process has it."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    key = directory.resolve()
    if key in _held:
        _held[key][1] += 1
        try:
            yield
        finally:
            _held[key][1] -= 1
        return
    descriptor = os.open(key / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = read_holder(descriptor)
        os.close(descriptor)
        raise LockedError(f"{what} {directory} is in use by another rlcompile process{holder}; wait for it to "
                          "finish or stop it, then run again (it resumes)") from None  # fmt: skip
    os.ftruncate(descriptor, 0)
    os.write(descriptor, str(os.getpid()).encode())
    _held[key] = [descriptor, 1]
    try:
        yield
    finally:
        _held.pop(key)
        fcntl.flock(descriptor, fcntl.LOCK_UN)
        os.close(descriptor)


def read_holder(descriptor: int) -> str:
    """`` (pid N)`` from the lock file, when the holder wrote it."""
    text = os.pread(descriptor, 32, 0).decode(errors="replace").strip()
    return f" (pid {text})" if text.isdigit() else ""
