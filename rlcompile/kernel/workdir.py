"""A tuning work directory: what makes a run resumable and its results trustworthy.

    environment.json            target, CPU, library versions and the tensors' layout (nchw or nchwc); a
                                mismatch on resume is refused
    measurements.jsonl          one line per measured candidate (ok or failed), appended and fsync'd
                                after every batch: the resume log and the failure record
    database_workload.json      MetaSchedule JSON database with the successful records only, used to
    database_tuning_record.json build the tuned model and by MetaSchedule's own search
    tasks.json                  the model's extracted tasks (TVM JSON), saved as soon as they exist so a
                                resumed run skips the import and the extraction
    logs/                       MetaSchedule's per-task logs

A run killed at any point (kill -9 included) loses at most the batch in flight: a line of any of the
JSON-lines files that does not parse (a truncated last line, a damaged one in the middle) is moved to
``FILE.corrupt`` when the directory is opened again, and the good lines around it are kept.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterator
from pathlib import Path

from rlcompile import atomic
from rlcompile.errors import RlcompileError, RlcompileWarning
from rlcompile.machine import cpu_mismatch, environment

#: Environment fields that must match for measurements to be comparable.
MATCHED_FIELDS = ("target", "cpu", "cores", "apache-tvm")


def environment_fingerprint(target: str) -> dict:
    env = environment()
    return {"target": target, "cpu": env["cpu"], "cpu_signature": env["cpu_signature"], "cores": env["cores"],
            "apache-tvm": env["packages"]["apache-tvm"], "recorded": env}  # fmt: skip


def set_aside_corrupt_lines(path: Path) -> int:
    """Move lines that are not JSON (a write cut short by a kill, a damaged disk block) to ``PATH.corrupt``.

    Every good line stays, in order; the bad ones are kept aside, never silently deleted. The file is
    rewritten atomically, so a kill during the repair leaves either the old or the repaired file.
    Returns how many lines were set aside.
    """
    if not path.exists():
        return 0
    lines = path.read_bytes().splitlines(keepends=True)
    good, bad = [], []
    for line in lines:
        if not line.strip():
            continue
        (good if is_json_line(line) else bad).append(line if line.endswith(b"\n") else line + b"\n")
    if not bad:
        return 0
    with (path.parent / f"{path.name}.corrupt").open("ab") as aside:
        aside.writelines(bad)
    atomic.write_bytes(path, b"".join(good))
    return len(bad)


def is_json_line(line: bytes) -> bool:
    try:
        json.loads(line)
    except ValueError:
        return False
    return True


def read_journal(path: Path) -> Iterator[dict]:
    """The measurements of a journal file, oldest first (none when it does not exist)."""
    if not path.exists():
        return
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                yield json.loads(line)


class WorkDir:
    """Opens (or creates) a work directory for one target and checks it was made on this machine.

    ``layout``: the convolutions' layout its tasks are tuned in (:data:`rlcompile.kernel.tasks.LAYOUTS`);
    ``None`` opens an existing directory in the layout it was made with (``nchw`` for a new one, and for
    directories made before layouts were recorded). Building with the records uses the same layout.
    """

    def __init__(self, path: Path, target: str, layout: str | None = None) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        (self.path / "logs").mkdir(exist_ok=True)
        self.journal_path = self.path / "measurements.jsonl"
        self.workload_path = self.path / "database_workload.json"
        self.record_path = self.path / "database_tuning_record.json"
        self.tasks_path = self.path / "tasks.json"
        self.dropped_lines = sum(
            set_aside_corrupt_lines(p) for p in (self.journal_path, self.workload_path, self.record_path)
        )
        if self.dropped_lines:
            warnings.warn(f"{self.path}: {self.dropped_lines} damaged line(s) set aside in *.corrupt files; "
                          "the measurements on them will be taken again", RlcompileWarning, stacklevel=2)  # fmt: skip
        self.layout = self.check_environment(environment_fingerprint(target), layout)
        self._database = None

    def check_environment(self, current: dict, layout: str | None) -> str:
        """Refuse a directory made on another machine, target, TVM version or layout; record a new one's
        environment. Returns the directory's layout."""
        stored_path = self.path / "environment.json"
        if not stored_path.exists():
            stored_path.write_text(json.dumps(current | {"layout": layout or "nchw"}, indent=1))
            return layout or "nchw"
        stored = json.loads(stored_path.read_text())
        recorded = stored.get("layout", "nchw")
        if layout is not None and layout != recorded:
            raise RlcompileError(f"work dir {self.path} was tuned in the {recorded} layout, this run asks for "
                                 f"{layout}; its records do not apply (use another --work-dir)")  # fmt: skip
        for field in MATCHED_FIELDS:
            if stored.get(field) != current[field]:
                raise RlcompileError(
                    f"work dir {self.path} was tuned with {field}={stored.get(field)!r}, this run has "
                    f"{current[field]!r}; its measurements do not apply here (use another --work-dir)"
                )
        if mismatch := cpu_mismatch(stored):  # same name, other signature (e.g. with and without AVX-512)
            raise RlcompileError(f"work dir {self.path} was {mismatch}; its measurements do not apply here "
                                 "(use another --work-dir)")  # fmt: skip
        return recorded

    @property
    def database(self):
        """MetaSchedule's JSON database in this directory (opened once)."""
        if self._database is None:
            from tvm.s_tir.meta_schedule.database import JSONDatabase

            self._database = JSONDatabase(str(self.workload_path), str(self.record_path), allow_missing=True)
        return self._database

    def journal(self) -> Iterator[dict]:
        """Every measurement recorded so far, oldest first."""
        return read_journal(self.journal_path)

    def append(self, entries: list[dict]) -> None:
        """Append measurements and force them to disk before the next batch starts."""
        if not entries:
            return
        with self.journal_path.open("a", encoding="utf-8") as handle:
            handle.write("".join(json.dumps(entry) + "\n" for entry in entries))
            handle.flush()
            os.fsync(handle.fileno())
