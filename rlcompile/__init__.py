"""rlcompile: reinforcement-learning agents that make a DNN compiler's decisions.

Three levels, one package: ``rlcompile.graph`` (substitutions on ONNX graphs), ``rlcompile.layer``
(per-layer library selection) and ``rlcompile.kernel`` (schedule search for tensor programs), composed
by ``rlcompile.optimize`` into a plan directory (``rlcompile.plan``). Shared pieces live beside them:
``models`` (zoo and user models), ``runtimes`` (ONNX Runtime, OpenVINO, PyTorch, TVM behind one
interface), ``measure`` (timing and the contest every decision goes through) and ``report`` (tables and
plots). The floors and what flows between them: ``docs/architecture.md``.
"""

__version__ = "0.1.0"

from rlcompile.threads import quiet_idle_threads

quiet_idle_threads()


def load(path):
    """A saved result, ready to run: ``rlcompile.load("r18").run({"input": x})`` -> list of outputs.

    Accepts a plan directory from ``rlcompile optimize`` or ``rlcompile select``, and a ``.tar`` from
    ``rlcompile build``; one made on another CPU or with other library versions is refused
    (:class:`rlcompile.errors.RlcompileError`).
    """
    from rlcompile.saved import load_saved

    return load_saved(path)
