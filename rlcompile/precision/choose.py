"""The layer level's decision as ``select`` and ``optimize`` both make it: a library per fusion group, then,
when the accuracy contract allows a lowered precision, the precision searches; one deadline split between them.

The precision path (and its imports: quantisation, data loading) is reached only when the contract allows it.
"""

from __future__ import annotations

import time
from pathlib import Path

from rlcompile.events import Listener, ignore
from rlcompile.layer.selection.api import select_segments
from rlcompile.layer.selection.record import Selection
from rlcompile.measure import DEFAULT, MeasureConfig
from rlcompile.models.onnx_model import LoadedModel
from rlcompile.precision.contract import AccuracyContract

#: With a lowered precision allowed, the part of the time the library choice gets (the precision searches and
#: their contest the rest).
LIBRARY_SHARE = 0.4
#: The precision searches stop with this part of their time left: the final contest and writing need it.
FINAL_PART = 0.2


def choose_plan(model: LoadedModel, contract: AccuracyContract, agent: str = "qlearning", seed: int = 0,
                threads: int = 1, library_names: list[str] | None = None, tuning_db: Path | None = None,
                table_dir: Path | None = None, timing: MeasureConfig = DEFAULT, progress: Listener = ignore,
                baseline: LoadedModel | None = None, mixed: bool = True, deadline: float | None = None,
                work: Path | None = None, leave_out_idle: bool = True,
                **solver_options: object) -> tuple[Selection, dict | None]:  # fmt: skip
    """The selection (its ``chosen`` plan measured fastest within the contract) and, with a lowered precision
    allowed, the precision choice as the manifest keeps it (else ``None``). ``leave_out_idle``: as
    :func:`~rlcompile.layer.selection.select_segments` takes it (the commands: when the user named no libraries).

    ``deadline`` (``time.monotonic()``): when everything, the final contest included, should be done; the
    library choice gets all of it under an exact contract, :data:`LIBRARY_SHARE` of it otherwise.
    """
    started = time.monotonic()
    library_deadline = deadline
    if deadline is not None and not contract.exact:
        library_deadline = started + LIBRARY_SHARE * (deadline - started)
    selection = select_segments(model, agent, seed, threads, library_names, tuning_db, table_dir, timing,
                                progress, baseline=baseline, mixed=mixed, deadline=library_deadline,
                                leave_out_idle=leave_out_idle, **solver_options)  # fmt: skip
    if contract.exact:
        return selection, None
    from rlcompile.precision import choose_precision

    search_deadline = None if deadline is None else deadline - FINAL_PART * max(deadline - time.monotonic(), 0.0)
    choice = choose_precision(selection, contract, agent, seed, work, timing, progress, deadline=search_deadline,
                              final_deadline=deadline)  # fmt: skip
    return selection, choice.to_dict()
