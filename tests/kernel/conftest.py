"""Small kernel-level tasks (fast to schedule, build and run) shared by the kernel tests."""

from __future__ import annotations

import pytest

from rlcompile.kernel.tasks import ConvShape, Task

SMALL_CONV = ConvShape(1, 16, 14, 14, 32, (3, 3), (1, 1), (1, 1, 1, 1))
DEPTHWISE_CONV = ConvShape(1, 32, 14, 14, 32, (3, 3), (1, 1), (1, 1, 1, 1), groups=32)


def make_task(shape: ConvShape, target, name: str = "small_conv") -> Task:
    return Task(name=name, label=shape.label(), mod=shape.prim_func_module(), target=target)


def matmul_module(m: int = 32, k: int = 64, n: int = 48):
    from tvm import te

    from rlcompile.tvm_bridge import tvm

    a = te.placeholder((m, k), name="A")
    b = te.placeholder((k, n), name="B")
    reduce = te.reduce_axis((0, k), name="k")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, reduce] * b[reduce, j], axis=reduce), name="C")
    return tvm.IRModule({"main": te.create_prim_func([a, b, c])})


@pytest.fixture
def small_conv_task(target) -> Task:
    return make_task(SMALL_CONV, target)


def tune_context(task: Task):
    from tvm.s_tir import meta_schedule as ms

    from rlcompile.tvm_bridge import load_tensor_intrinsics

    load_tensor_intrinsics(task.target)
    return ms.TuneContext(mod=task.mod, target=task.target, space_generator="post-order-apply",
                          task_name=task.name, num_threads=1, rand_state=0)  # fmt: skip


def copy_work_dir(source, destination, **environment) -> None:
    """A copy of a work directory's files whose ``environment.json`` says ``environment`` (another machine's)."""
    import json

    destination.mkdir()
    for item in source.iterdir():
        if item.is_file():
            (destination / item.name).write_bytes(item.read_bytes())
    recorded = json.loads((destination / "environment.json").read_text())
    (destination / "environment.json").write_text(json.dumps(recorded | environment))
