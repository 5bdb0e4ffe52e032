"""Files replaced in one step, so that a run killed mid-write leaves the previous file whole.

Every saved result (tuning caches, checkpoints, lookup tables, plan manifests, benchmark JSON) is
written to a scratch file next to its destination and renamed over it: ``os.replace`` is atomic on
one file system, so readers see either the old file or the new one, never half of either.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def replacing(path: str | Path) -> Iterator[Path]:
    """Yield a scratch path to write; when the block ends normally it replaces ``path`` in one step.

    The scratch name is unique (process id and a random part), so two writers never share one; if
    the block raises, the scratch is removed and ``path`` is left as it was.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        yield scratch
        os.replace(scratch, path)
    finally:
        scratch.unlink(missing_ok=True)


def write_text(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically."""
    with replacing(path) as scratch:
        scratch.write_text(text)


def write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically."""
    with replacing(path) as scratch:
        scratch.write_bytes(data)


def write_json(path: str | Path, payload: object, **dump_options) -> None:
    """Write ``payload`` as JSON to ``path`` atomically (``dump_options`` go to :func:`json.dumps`)."""
    write_text(path, json.dumps(payload, **dump_options))
