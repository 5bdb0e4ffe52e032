#!/usr/bin/env bash
# The CUDA paths of the kernel level on a lent GPU: TVM's target, run/compare, tasks, a short tune (3 tasks,
# chameleon, 48 trials), build, and the built .tar run against ONNX Runtime. JSON to $OUT (results/gpu_check by
# default). TARGET=llvm runs the same steps on this CPU (about 6 minutes on the 2-core VM).
#   bash benchmarks/gpu_check.sh            # on the GPU machine, from the repository root
OUT=${OUT:-results/gpu_check}
mkdir -p "$OUT"
T=${TARGET:-cuda}
PY=${PY:-python3}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
S=$(date +%s)
lap() { echo "== $1 at $(( $(date +%s) - S )) s"; }
$PY -c "import tvm; d=tvm.cuda(0); print('cuda exists', d.exist); print(tvm.target.Target.from_device(d) if d.exist else 'no gpu')"
lap tvm
# Only the target's tensor intrinsics are registered (tvm_bridge.load_tensor_intrinsics): CUDA's tensor-core ones
$PY -c "
import time; from rlcompile.tvm_bridge import load_tensor_intrinsics, tvm; from tvm.s_tir import TensorIntrin
t = time.perf_counter(); load_tensor_intrinsics(tvm.target.Target('cuda'))
names = ['mma_ldmatrix_f16_a', 'mma_f16f16f32', 'wmma_sync_16x16x16_f16f16f32']
print('cuda intrinsics', {n: TensorIntrin.get(n, allow_missing=True) is not None for n in names}, f'{time.perf_counter() - t:.1f} s')"
lap intrinsics
$PY -m rlcompile run resnet18 --runtime tvm --target $T --quick --json $OUT/run_tvm.json 2>&1 | tail -8
lap run
$PY -m rlcompile compare resnet18 --runtimes ort,tvm --target $T --quick --json $OUT/compare.json 2>&1 | tail -12
lap compare
$PY -m rlcompile tasks resnet18 --target $T 2>&1 | tail -5
lap tasks
timeout 200 $PY -m rlcompile tune resnet18 --target $T --agent chameleon --trials 48 --batch-size 8 --tasks 0,1,2 --work-dir /tmp/tw 2>&1 | tail -15
lap tune
$PY -m rlcompile build resnet18 --target $T --work-dir /tmp/tw -o /tmp/r18.tar 2>&1 | tail -5
lap build
$PY -m rlcompile run /tmp/r18.tar --quick --json $OUT/run_tar.json 2>&1 | tail -8
lap runtar
cp /tmp/tw/tune_summary.json $OUT/ 2>/dev/null
