#!/usr/bin/env bash
# A lent GPU machine checked in one short run: its CUDA paths (TVM's cuda target: run, compare) and, on its
# own CPU (an Intel Xeon, where AMX and AVX512-BF16 may be present), the precision paths: what the CPU flags
# say, the precision tests, and benchmarks/precision.py on two models with a short search. Each step has its
# own time limit and writes to $OUT as it finishes, so a run stopped early still returns what it did.
#   OUT=results/device_check/h100 bash benchmarks/device_check.sh     # from the repository root
# (benchmarks/gpu_check.sh is the longer CUDA check: it also tunes and builds.) The lent machines' image has no
# apache-tvm, apache-tvm-ffi, openvino, xgboost-cpu, gymnasium, onnxslim or rapidocr-onnxruntime: unpack their cp312
# wheels into one directory, tar it with xz (about 110 MB) and carry it in halves under 64 MiB over two calls on the
# warm machine (the first copies its half out of the working tree), then PYTHONPATH=that directory.
OUT=${OUT:-results/device_check}
mkdir -p "$OUT"
PY=${PY:-python3}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
S=$(date +%s)
lap() { echo "== $1 at $(( $(date +%s) - S )) s"; }
$PY - <<'EOF' | tee "$OUT/machine.txt"
from rlcompile.machine import cpu_flags, cpu_model, cpu_signature, host_cores, isa_class
from rlcompile.precision.quantize import has_vnni
from rlcompile.runtimes.openvino import BF16_FLAGS
flags = cpu_flags()
print("cpu", cpu_model(), "|", cpu_signature(), "| cores", host_cores(), "| isa", isa_class())
print("bf16 flags", sorted(flags & BF16_FLAGS), "| vnni", has_vnni(), "| amx", sorted(f for f in flags if f.startswith("amx")))
EOF
$PY -c "import tvm; d=tvm.cuda(0); print('cuda exists', d.exist, tvm.target.Target.from_device(d) if d.exist else '')"
lap machine
timeout 90 $PY -m rlcompile compare resnet18 --runtimes ort,tvm --target cuda --quick --json "$OUT/compare_cuda.json" 2>&1 | tail -8
lap compare-cuda
timeout 150 $PY -m pytest -q -p no:cacheprovider tests/layer/test_precision.py 2>&1 | tail -5
lap precision-tests
timeout "${PRECISION_S:-240}" $PY benchmarks/precision.py --models "${MODELS:-resnet18,ocr-rec}" --no-nncf \
    --search-minutes "${SEARCH_MIN:-1}" --samples 32 --out "$OUT/precision" 2>&1 | tail -40
lap precision-benchmark
