"""``rlcompile export`` and the light loader: a plan written for the runtime a user deploys on, checked in a
fresh process that cannot import rlcompile, torch or TVM; plans loaded with only the runtimes they use."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rlcompile.cli import main
from rlcompile.export import FORBIDDEN_MODULES, snippet
from rlcompile.manifest import Manifest


@pytest.fixture(scope="module")
def ort_plan(tmp_path_factory) -> Path:
    """A real plan of one segment on ONNX Runtime: ``select`` on lenet5 with ORT as the only library."""
    folder = tmp_path_factory.mktemp("export")
    plan = folder / "lenet5.plan"
    argv = ["select", "lenet5", "--runtimes", "ort", "--threads", "2", "--quick", "-o", str(plan),
            "--table-dir", str(folder / "tables")]  # fmt: skip
    assert main(argv) == 0
    return plan


def retargeted(plan: Path, destination: Path, libraries: list[str]) -> Path:
    """A copy of ``plan`` whose segments are declared to run on ``libraries`` (the same ONNX segment)."""
    shutil.copytree(plan, destination)
    manifest = json.loads((destination / "manifest.json").read_text())
    manifest["segments"] = [manifest["segments"][0] | {"library": library, "files": []} for library in libraries]
    (destination / "manifest.json").write_text(json.dumps(manifest))
    return destination


@pytest.fixture(scope="module")
def openvino_plan(ort_plan: Path, tmp_path_factory) -> Path:
    return retargeted(ort_plan, tmp_path_factory.mktemp("ov") / "lenet5.plan", ["openvino"])


def export(plan: Path, target: str, output: Path) -> dict:
    report = output.parent / f"{output.name}.json"
    assert main(["export", str(plan), "--to", target, "-o", str(output), "--quick", "--json", str(report)]) == 0
    return json.loads(report.read_text())


@pytest.mark.parametrize(("target", "files"), [("onnxruntime", {"model.onnx", "onnxruntime.json", "README.md"}),
                                               ("openvino", {"model.xml", "model.bin", "openvino.json", "README.md"})])
def test_a_single_runtime_plan_exports_and_runs_with_that_runtime_alone(ort_plan, openvino_plan, tmp_path, target,
                                                                       files):  # fmt: skip
    plan = ort_plan if target == "onnxruntime" else openvino_plan
    result = export(plan, target, tmp_path / target)
    assert {path.name for path in (tmp_path / target).iterdir()} == files
    check = result["check"]
    assert check["agreement"]["max_rel"] < 1e-4 and check["export_ms"] > 0 and check["plan_ms"] > 0
    # the README's lines, run again here by hand in a process where rlcompile, torch and TVM cannot be imported
    reference = np.load(plan / "reference.npz")
    feeds = {key.split(":", 1)[1]: reference[key] for key in reference.files if key.startswith("input:")}
    np.savez(tmp_path / "feeds.npz", **feeds)
    code = (f"import importlib.abc, sys\nclass Refuse(importlib.abc.MetaPathFinder):\n"
            f"    def find_spec(self, name, path=None, target=None):\n"
            f"        if name.split('.')[0] in {set(FORBIDDEN_MODULES)!r}: raise ImportError(name)\n"
            f"sys.meta_path.insert(0, Refuse())\nimport numpy as np\n"
            f"feeds = dict(np.load({str(tmp_path / 'feeds.npz')!r}))\n"
            + snippet(target) + f"np.save({str(tmp_path / 'out.npy')!r}, np.asarray(run(feeds)[0]))\n")  # fmt: skip
    subprocess.run([sys.executable, "-I", "-c", code], cwd=tmp_path / target, check=True)
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), reference["output:0"], rtol=1e-4, atol=1e-5)


def test_a_plan_exports_as_itself_and_loads_again(ort_plan, tmp_path):
    result = export(ort_plan, "plan", tmp_path / "copy")
    assert (tmp_path / "copy" / "manifest.json").is_file() and not (tmp_path / "copy" / "work").exists()
    assert Manifest.load(tmp_path / "copy") == Manifest.load(ort_plan)
    assert result["check"]["agreement"]["max_rel"] < 1e-5


def test_a_plan_that_needs_two_runtimes_is_refused_for_one_in_one_line(ort_plan, tmp_path, capsys):
    mixed = retargeted(ort_plan, tmp_path / "mixed", ["ort", "openvino"])
    assert main(["export", str(mixed), "--to", "openvino", "-o", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("rlcompile: error: this plan needs ort + openvino (2 segments)") and "\n" not in error
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("which", ["ort", "openvino"])
def test_loading_a_single_library_plan_imports_neither_torch_nor_tvm(ort_plan, openvino_plan, which):
    plan = ort_plan if which == "ort" else openvino_plan
    code = (f"import sys, numpy as np, rlcompile\nplan = rlcompile.load({str(plan)!r})\n"
            "plan.run(plan.reference_inputs)\n"
            "print(','.join(m for m in ('torch', 'tvm', 'torch_geometric') if m in sys.modules))")  # fmt: skip
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert loaded == ""


def test_a_command_without_the_tuning_group_says_what_to_install(tmp_path):
    code = ("import importlib.abc, sys\nclass Missing(importlib.abc.MetaPathFinder):\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name.split('.')[0] in ('torch', 'tvm'):\n"
            "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
            "sys.meta_path.insert(0, Missing())\nfrom rlcompile.cli import main\n"
            f"sys.exit(main(['tune', 'lenet5', '--work-dir', {str(tmp_path / 'work')!r}, '--trials', '2']))"
            )  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 2, done.stderr
    line = done.stderr.strip()
    assert line.startswith("rlcompile: error: `rlcompile tune` needs the tuning dependencies") and "\n" not in line
    assert "pip install 'rlcompile[tune]'" in line
