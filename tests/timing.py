"""The timing the tests that run whole selections and pipelines measure at.

What they check is what the code decides and records, not how finely it times: blocks of 0.02 s (lenet5's
0.05 ms call runs ~400 times a block), also when a contest is fitted to a deadline (``--quick``'s 0.1 s blocks
are lengthened to :attr:`~rlcompile.measure.MeasureConfig.floor_time_s`'s 0.25 s there). The contests were most
of what these tests waited for: an ``optimize`` of lenet5 took 57 s at ``--quick``, 44 s at these blocks.
"""

from __future__ import annotations

from dataclasses import replace

from rlcompile.measure import QUICK

BLOCKS = replace(QUICK, min_time_s=0.02, max_time_s=1.0, floor_time_s=0.02)
