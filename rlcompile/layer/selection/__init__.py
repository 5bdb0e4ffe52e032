"""``rlcompile select``: a library per fusion group, chosen on the table and then by measurement.

1. Fold BatchNorm, form fusion groups, profile them per library (or reuse the table).
2. The libraries the table's exact optimum does as well without (within :func:`idle_band`) are left out of the
   plans (:func:`~rlcompile.layer.problem.idle_libraries`); the agent solves the table on the others (QS-DNN's
   Q-learning by default; every solver keeps its interface).
3. The candidates: the agent's plan, the table's exact optimum and every single-library plan. Each is
   cut into segments, compiled, checked against ONNX Runtime, and all are timed in one contest in one
   process together with ONNX Runtime and OpenVINO run natively on the original model.
4. The fastest candidate wins; candidates within :data:`TIE_BAND` of it, or within the noise the contest's
   identical sessions measured when that is larger, count as ties, and a tie goes to the plan with fewer
   segments. Because the single-library plans and the native runs are candidates, the result is never slower
   than the best single library beyond the timing noise.
"""

from __future__ import annotations

from rlcompile.layer.selection.api import select_segments
from rlcompile.layer.selection.candidates import Candidate
from rlcompile.layer.selection.record import Selection

__all__ = ["Candidate", "Selection", "select_segments"]
