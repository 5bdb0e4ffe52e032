"""Every name a factory creates, in one light module: the CLI's choices and help come from here.

Importing this module imports nothing else (no ONNX Runtime, torch or TVM), so ``rlcompile --help`` and
argument checking stay fast. Each factory — ``runtimes.create``, ``graph.search.create``,
``graph.cost.create``, ``kernel.strategies.create``, ``kernel.scheduler.create``,
``layer.solvers.create``, ``layer.per_operator.primitives.create`` — creates exactly the names listed
here (``tests/test_names.py`` checks it).

The vocabulary, one noun per role across the three levels:

- **runtime**: a library that compiles and runs an ONNX model or a segment of one (ONNX Runtime,
  OpenVINO, PyTorch/oneDNN, TVM). The CLI's ``--libraries`` and ``--backend(s)`` name runtimes.
- **agent**: what makes a level's decisions (graph: a search or a learning agent; kernel: a search
  *strategy*; layer: a *solver* of the lookup table).
- **contest**: contenders timed in turns beside identical twins, judged by a keep rule
  (:mod:`rlcompile.measure.contest`).
- **plan**: what ``select`` and ``optimize`` return and save: a library per fusion group, cut into
  *segments*, each compiled by its runtime (:mod:`rlcompile.plan`).
- **stage**: one level's step inside ``optimize`` (:mod:`rlcompile.optimize.stages`).
"""

from __future__ import annotations

#: Runtimes by name (:func:`rlcompile.runtimes.create`).
RUNTIMES = ("ort", "openvino", "torch", "tvm")
#: Runtimes the layer level uses when the user names none: the ones a CPU user would deploy with. TVM
#: joins when asked for or when a tuning database is given (untuned TVM never wins on CPU).
DEFAULT_RUNTIMES = ("ort", "openvino", "torch")
#: The runtime every group can fall back to, and the reference every result is checked against.
REFERENCE_RUNTIME = "ort"
#: Runtimes that run whole models for ``run`` and ``compare``.
MODEL_RUNTIMES = ("ort", "tvm")
ORT_OPT_LEVELS = ("disable", "basic", "extended", "all")

#: Graph-level agents (:func:`rlcompile.graph.search.create`); the learning ones need torch_geometric.
GRAPH_SEARCHES = ("greedy", "taso")
GRAPH_LEARNING_AGENTS = ("ppo", "world-model")
GRAPH_AGENTS = GRAPH_SEARCHES + GRAPH_LEARNING_AGENTS
#: Graph cost models (:func:`rlcompile.graph.cost.create`).
GRAPH_COSTS = ("sum", "fused", "region", "context", "measured")

#: Kernel search strategies (:func:`rlcompile.kernel.strategies.create`).
KERNEL_STRATEGIES = ("random", "sa", "droplet", "evolutionary", "rl", "chameleon")
#: How sa / rl / chameleon choose the batch to measure.
SAMPLINGS = ("greedy", "adaptive")
#: Strategies whose batch can be chosen by adaptive sampling.
SAMPLING_STRATEGIES = ("sa", "rl", "chameleon")
#: The convolutions' layout when kernels are tuned and built (:func:`rlcompile.kernel.tasks.prepare_relax`):
#: ``nchw`` as the ONNX graph has it, or ``nchwc``, channels in blocks of the CPU's vector width.
LAYOUTS = ("nchw", "nchwc")
#: ``optimize``'s kernel stage: ``auto`` blocks a model without grouped convolutions (measured with
#: :file:`benchmarks/pretrained.py` e2e ``--layout``: resnet18 1.4x faster blocked, mobilenet_v2 slower,
#: its depthwise convolutions stay NCHW and every block pays two layout transforms).
OPTIMIZE_LAYOUTS = ("auto", *LAYOUTS)
DEFAULT_LAYOUT = "auto"
#: Task schedulers (:func:`rlcompile.kernel.scheduler.create`).
KERNEL_SCHEDULERS = ("gradient", "round-robin")

#: Layer-level solvers of the lookup table (:func:`rlcompile.layer.solvers.create`).
LAYER_SOLVERS = ("qlearning", "random", "greedy", "single", "exact")

#: Where ``rlcompile export`` writes a plan for: the runtime a user deploys on, or the plan directory itself.
EXPORT_TARGETS = ("onnxruntime", "openvino", "plan")

#: Top-level modules of the ``rlcompile[tune]`` dependency group (pyproject.toml): a command that needs one
#: that is missing says to install the group.
TUNE_MODULES = ("torch", "tvm", "tvm_ffi", "onnxscript", "onnx_ir", "xgboost", "sklearn", "scipy", "gymnasium",
                "torch_geometric", "psutil", "threadpoolctl", "cloudpickle", "matplotlib", "tornado")  # fmt: skip

#: ``optimize``'s levels, in pipeline order.
LEVELS = ("graph", "kernel", "layer")


def choices(names: tuple[str, ...]) -> str:
    """``a, b or c``: how help texts list names."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
