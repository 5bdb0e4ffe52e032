"""Only the tensor intrinsics a target's design spaces can name are registered (the CUDA ones alone took 12 of
the 16 s every tuning process paid on a slow 2-core VM)."""

from __future__ import annotations

import pytest

from rlcompile.tvm_bridge import ALL_INTRINSICS, intrinsics_for, load_tensor_intrinsics, tvm


@pytest.mark.parametrize(("target", "modules"), [
    ({"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "znver4"}, ("x86",)),
    ({"kind": "llvm", "mtriple": "aarch64-linux-gnu"}, ("arm_cpu",)),
    ({"kind": "llvm", "mtriple": "riscv64-linux-gnu"}, ("riscv_cpu",)),
    ("cuda", ("cuda",)),
    ("c", ALL_INTRINSICS),
])  # fmt: skip
def test_each_target_loads_its_own_family(target: str | dict, modules: tuple[str, ...]) -> None:
    assert intrinsics_for(tvm.target.Target(target)) == modules


def test_the_x86_intrinsics_a_cpu_schedule_names_are_registered_and_an_arm_target_adds_its_own() -> None:
    from tvm.s_tir import TensorIntrin

    load_tensor_intrinsics(tvm.target.Target({"kind": "llvm", "mtriple": "x86_64-linux-gnu"}))
    assert TensorIntrin.get("dot_16x4_vnni", allow_missing=True) is not None
    load_tensor_intrinsics(tvm.target.Target({"kind": "llvm", "mtriple": "aarch64-linux-gnu"}))
    assert TensorIntrin.get("dot_4x4_i8i8s32_sdot", allow_missing=True) is not None
