"""The layer level (seed 003, QS-DNN): which runtime runs each fusion group of a model, paying for the
boundaries between them.

The main path (``rlcompile select``, ``optimize``'s layer stage): fusion groups (:mod:`.groups`), their
lookup table measured per runtime (:mod:`.group_table`), the agents that solve it (:mod:`.solvers`,
QS-DNN's Q-learning first), and the plan cut into segments (:mod:`.segments`) that the selection
(:mod:`.selection`) compiles, verifies and times beside the native runs. The seed's own setting, a
primitive per ONNX operator run layer by layer, lives in :mod:`.per_operator` (``select --per-operator``).
"""
