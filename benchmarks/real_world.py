"""Every command on ONNX models this project did not produce, as a new user would try them.

    python benchmarks/real_world.py [--models ocr-cls,ocr-det,ocr-rec,ocr-cls-q,ocr-rec-q]
                                    [--commands run,compare,tasks,tune,graph,select,optimize]
                                    [--out results/real_world]

Models: PaddleOCR's direction classifier, detector and recogniser shipped in the
``rapidocr-onnxruntime`` wheel (dynamic inputs, fixed with ``--input-shape``), and dynamically quantised
versions of the classifier and the recogniser made here with ONNX Runtime's ``quantize_dynamic``
(ConvInteger, MatMulInteger, DynamicQuantizeLinear; their Constant weights are turned into initializers
first, as the quantiser needs). Each command runs in its own process with small budgets; recorded per
(model, command): exit status, wall seconds and the last line it printed. Exit 0 is success; exit 2
must come with one line saying why (never a traceback). Results go to ``real_world.json`` as each
command finishes; a re-run skips what is there.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import onnx
from rich.console import Console
from rich.table import Table

from rlcompile.models.packaged import PACKAGED, packaged_path

console = Console(width=200)
#: name -> (the packaged model whose wheel file is run by path, quantised?)
MODELS = {"ocr-cls": ("ocr-cls", False), "ocr-det": ("ocr-det", False), "ocr-rec": ("ocr-rec", False),
          "ocr-cls-q": ("ocr-cls", True), "ocr-rec-q": ("ocr-rec", True)}  # fmt: skip
#: command -> arguments after MODEL; {out} is this (model, command)'s output folder.
COMMANDS = {
    "run": ["--quick"],
    "compare": ["--backends", "ort,tvm", "--quick"],
    "tasks": [],
    "tune": ["--strategy", "random", "--trials", "8", "--batch-size", "8", "--tasks", "0", "--work-dir", "{out}"],
    "graph": ["--agent", "taso", "--time-limit", "60", "--quick", "-o", "{out}/graph.onnx"],
    "select": ["--agent", "qlearning", "--quick", "-o", "{out}/plan", "--table-dir", "{out}/tables"],
    "optimize": ["--budget", "2m", "-o", "{out}/opt"],
}


def quantised_copy(source: Path, folder: Path) -> Path:
    """``quantize_dynamic`` of ``source``, after turning Constant nodes into initializers."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    target = folder / f"{source.stem}_quantised.onnx"
    if target.exists():
        return target
    model = onnx.load(str(source))
    kept = []
    for node in model.graph.node:
        if node.op_type == "Constant" and node.attribute[0].name == "value":
            tensor = onnx.TensorProto()
            tensor.CopyFrom(node.attribute[0].t)
            tensor.name = node.output[0]
            model.graph.initializer.append(tensor)
        else:
            kept.append(node)
    del model.graph.node[:]
    model.graph.node.extend(kept)
    plain = folder / f"{source.stem}_initializers.onnx"
    onnx.save(model, str(plain))
    quantize_dynamic(str(plain), str(target), weight_type=QuantType.QUInt8)
    return target


def try_command(model: Path, shape: str, command: str, out: Path) -> dict:
    arguments = [part.format(out=out) for part in COMMANDS[command]]
    argv = ["rlcompile", command, str(model), "--input-shape", shape, *arguments]
    started = time.monotonic()
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=900, check=False)
        status, output = done.returncode, (done.stdout + done.stderr)
    except subprocess.TimeoutExpired:
        status, output = None, "timed out after 900 s"
    lines = [line for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("rlcompile: error:")]
    return {"argv": argv, "status": status, "seconds": time.monotonic() - started,
            "traceback": "Traceback" in output, "last_line": (errors or lines or [""])[-1][:300]}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--commands", default=",".join(COMMANDS))
    parser.add_argument("--out", type=Path, default=Path("results/real_world"))
    args = parser.parse_args(argv)
    (args.out / "models").mkdir(parents=True, exist_ok=True)
    path = args.out / "real_world.json"
    saved = json.loads(path.read_text()) if path.exists() else {}
    for name in args.models.split(","):
        packaged, quantise = MODELS[name]
        model, shape = packaged_path(packaged), PACKAGED[packaged].input_shape
        if quantise:
            model = quantised_copy(model, args.out / "models")
        for command in args.commands.split(","):
            key = f"{name}/{command}"
            if key in saved:
                continue
            console.log(f"{key}")
            saved[key] = try_command(model, shape, command, args.out / "runs" / name / command)
            path.write_text(json.dumps(saved, indent=1))
    report = Table(title="every command on models this project did not produce")
    for column in ("model", "command", "exit", "s", "last line"):
        report.add_column(column)
    for key, row in saved.items():
        name, command = key.split("/")
        status = "timeout" if row["status"] is None else str(row["status"])
        report.add_row(name, command, status + (" TRACEBACK" if row["traceback"] else ""), f"{row['seconds']:.0f}",
                       row["last_line"])  # fmt: skip
    console.print(report)
    console.log(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
