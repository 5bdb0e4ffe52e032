"""``rlcompile export``: a plan in the runtime the user already deploys on, checked there.

* ``onnxruntime``: the model the plan runs (graph rewrites applied) as ``model.onnx``, the session options
  it was measured with in ``onnxruntime.json`` (threads, optimisation level, spinning policy) and a
  ``README.md`` with the lines that load it with plain ``onnxruntime``;
* ``openvino``: an IR (``model.xml``/``model.bin``, weights kept in fp32), the compile configuration
  measured in ``openvino.json`` (threads, hint, precision) and the loading lines;
* ``plan``: the plan directory itself (without ``optimize``'s ``work/`` folder), for plans that mix
  runtimes; it runs with ``rlcompile.load``.

A plan for a shape profile exports as one model when one dynamic variant serves every shape, else as one file per
variant with ``shapes.json``, the table of the shapes each serves, and README lines that pick the file by shape
(:mod:`.shapes`). A plan that one runtime cannot run alone is refused for that runtime in one line naming the
runtimes it needs. Every export is checked after it is written: a fresh Python process that cannot import rlcompile,
torch or TVM runs the README's lines on the plan's reference inputs; its outputs are compared with the
plan's reference outputs and its latency is timed in turns with the plan's, in this process.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import onnx

from rlcompile.errors import RlcompileError, check_choice, first_line
from rlcompile.events import Listener, Phase, ignore
from rlcompile.manifest import Manifest
from rlcompile.measure import DEFAULT, MeasureConfig, measure_latency
from rlcompile.names import EXPORT_TARGETS
from rlcompile.runtimes.base import RuntimeOptions
from rlcompile.runtimes.openvino import openvino_config
from rlcompile.verify import Agreement, compare_outputs

#: The runtime each target deploys on.
TARGET_RUNTIME = {"onnxruntime": "ort", "openvino": "openvino"}
#: What a check's fresh process must not be able to import: the export runs without them.
FORBIDDEN_MODULES = ("rlcompile", "torch", "tvm", "tvm_ffi")
#: Rounds of the plan (here) and the export (a fresh process) timed in turns.
CHECK_ROUNDS = 2
#: A serving block of the check of a throughput plan lasts this many times the timing's ``min_time_s`` (2 s by
#: default), after a warm-up half as long (a freshly compiled OpenVINO model's first requests allocate its buffers);
#: the rounds of the plan's two pools and two fresh processes of the export served in turns (:func:`serving_check`):
#: one compiled OpenVINO model served up to 7% more than another of the same file, so each side is served twice.
SERVE_TIMES = 2.0
SERVE_ROUNDS = 3
PLAN_FILES = ("manifest.json", "reference.npz", "segments", "report.md", "report.png")
README = "README.md"


@dataclass
class ExportCheck:
    """The export run by its runtime alone, beside the plan it came from."""

    agreement: Agreement
    export_ms: float
    plan_ms: float
    import_s: float
    first_run_s: float
    #: a throughput plan: inferences per second with its requests in flight, the export's (fresh process) and the
    #: plan's served here (``serve()``), in turns; the export's rate over the plan's, judged round by round; the
    #: larger spread of the two twins (two pools of the plan, two processes of the export)
    export_per_s: float | None = None
    plan_per_s: float | None = None
    serving_ratio: float | None = None
    serving_noise: float | None = None

    @property
    def ratio(self) -> float:
        return self.export_ms / self.plan_ms

    @property
    def serves_slower(self) -> bool:
        """The export served fewer requests per second than the plan, beyond the twins' spread."""
        return self.serving_ratio is not None and self.serving_ratio < 1 - self.serving_noise

    def to_dict(self) -> dict:
        return asdict(self) | {"agreement": self.agreement.to_dict(), "ratio": self.ratio,
                               "serves_slower": self.serves_slower}  # fmt: skip


@dataclass
class ExportResult:
    target: str
    output: Path
    files: list[str]
    check: ExportCheck

    def to_dict(self) -> dict:
        return {"target": self.target, "output": str(self.output), "files": self.files, "check": self.check.to_dict()}


def export_plan(plan_dir: str | Path, target: str, output: str | Path, timing: MeasureConfig = DEFAULT,
                progress: Listener = ignore) -> ExportResult:  # fmt: skip
    """Write the plan in ``plan_dir`` for ``target`` to ``output`` and check it there (see the module)."""
    from rlcompile.plan import load_plan

    plan_dir, output = Path(plan_dir), Path(output)
    check_choice("export target", target, EXPORT_TARGETS)
    manifest = read_manifest(plan_dir)
    if manifest.shapes is not None:
        from rlcompile.export.shapes import export_shaped

        return export_shaped(plan_dir, manifest, target, output, timing, progress)
    check_runs_alone(manifest, target)
    if output.resolve() == plan_dir.resolve():
        raise RlcompileError(f"-o {output} is the plan directory itself; write the export somewhere else")
    plan = load_plan(plan_dir)  # refuses a plan made on another CPU or with other library versions
    progress(Phase("export", f"writing {output}/ for {target}", "write"))
    prepare_output(output)
    if target == "plan":
        files = copy_plan(plan_dir, output)
    else:
        segment = onnx.load(str(plan_dir / manifest.segments[0]["onnx"]))
        files = WRITERS[target](segment, manifest, output)
    progress(Phase("export", f"checking {output}/ with {target} alone in a fresh process, in turns with the plan",
                   "check"))  # fmt: skip
    check = check_export(target, output, plan, timing)
    return ExportResult(target, output, files, check)


def read_manifest(plan_dir: Path) -> Manifest:
    try:
        return Manifest.load(plan_dir)
    except (OSError, KeyError, ValueError, TypeError) as error:
        raise RlcompileError(f"{plan_dir} is not an rlcompile plan directory: {first_line(error)}") from None


def check_runs_alone(manifest: Manifest, target: str) -> None:
    """Refuse in one line, naming the runtimes the plan needs, when ``target``'s runtime cannot run it alone."""
    used, count = manifest.runtimes, len(manifest.segments)
    if target == "plan" or (used == [TARGET_RUNTIME[target]] and count == 1):
        return
    by_runtime = {runtime: name for name, runtime in TARGET_RUNTIME.items()}
    other = f" or --to {by_runtime[used[0]]}" if len(used) == 1 and used[0] in by_runtime else ""
    raise RlcompileError(f"this plan needs {' + '.join(used)} ({count} segment{'s' if count > 1 else ''}); "
                         f"--to {target} takes a plan that {TARGET_RUNTIME[target]} runs alone: export it --to "
                         f"plan{other}")  # fmt: skip


def suggested_target(manifest: Manifest) -> str:
    """Where a plan deploys best: the runtime that runs it alone, or the plan directory itself."""
    used = manifest.runtimes
    by_runtime = {runtime: name for name, runtime in TARGET_RUNTIME.items()}
    alone = len(used) == 1 if manifest.shapes is not None else len(manifest.segments) == 1
    return by_runtime[used[0]] if alone and used[0] in by_runtime else "plan"


def export_command(manifest: Manifest, plan_dir: str | Path) -> str:
    """The command that exports ``plan_dir`` for the runtime it runs on."""
    target = suggested_target(manifest)
    return f"rlcompile export {plan_dir} --to {target} -o {str(plan_dir).rstrip('/')}_{target}"


def prepare_output(output: Path) -> None:
    """An empty directory at ``output`` (an earlier export there is replaced; anything else is refused)."""
    if output.exists() and not output.is_dir():
        raise RlcompileError(f"-o {output} exists and is not a directory")
    if output.is_dir() and any(output.iterdir()):
        marker = [name for name in ("onnxruntime.json", "openvino.json", "manifest.json") if (output / name).exists()]
        if not marker:
            raise RlcompileError(f"-o {output} is a directory with other files in it; choose an empty or new one")
        shutil.rmtree(output)
    try:
        output.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise RlcompileError(f"-o {output} cannot be written: {error.strerror or error}") from None


def copy_plan(plan_dir: Path, output: Path, names: tuple[str, ...] = PLAN_FILES) -> list[str]:
    """The plan directory's ``names`` copied to ``output`` with a README; the files copied."""
    files = []
    for name in names:
        source = plan_dir / name
        if source.is_dir():
            shutil.copytree(source, output / name)
        elif source.is_file():
            shutil.copy2(source, output / name)
        else:
            continue
        files.append(name)
    write_readme(output, "plan", snippet("plan"), [])
    return [*files, README]


def serving_of(manifest: Manifest):
    """How the plan serves concurrent requests (``--objective throughput``), or ``None``."""
    from rlcompile.runtimes.serving import Serving

    return Serving.from_json(manifest.serving["serving"]) if manifest.serving else None


def code_for(target: str, manifest: Manifest) -> str:
    """The README's lines for ``target``: :func:`snippet`, or for concurrent callers :func:`serving_snippet`."""
    return serving_snippet(target) if serving_of(manifest) is not None and target != "plan" else snippet(target)


def ort_config(threads: int) -> dict:
    """``onnxruntime.json``: the session options a plan run whole by ONNX Runtime was measured with."""
    return {"providers": ["CPUExecutionProvider"], "intra_op_num_threads": threads, "inter_op_num_threads": 1,
            "graph_optimization_level": "ORT_ENABLE_ALL", "session_config_entries": {},
            "spinning": "ONNX Runtime's default: the workers spin briefly between runs (the plan runs alone, "
                        "so the cores are its own); add session.intra_op.allow_spinning=0 when other work "
                        "shares them"}  # fmt: skip


def write_onnxruntime(segment: onnx.ModelProto, manifest: Manifest, output: Path) -> list[str]:
    onnx.save(segment, str(output / "model.onnx"))
    serving = serving_of(manifest)
    config = ort_config(serving.threads if serving and serving.threads else manifest.segment_threads(0))
    if serving is not None:
        config["sessions"] = serving.sessions
        config["session_config_entries"] = serving.session_config()
    (output / "onnxruntime.json").write_text(json.dumps(config, indent=1))
    write_readme(output, "onnxruntime", code_for("onnxruntime", manifest), ["model.onnx", "onnxruntime.json"])
    return ["model.onnx", "onnxruntime.json", README]


def write_openvino(segment: onnx.ModelProto, manifest: Manifest, output: Path) -> list[str]:
    import openvino as ov

    model = ov.Core().read_model(segment.SerializeToString())
    ov.save_model(model, str(output / "model.xml"), compress_to_fp16=False)  # exactly the weights measured
    precision = manifest.segments[0].get("precision", "fp32")
    config = openvino_config(RuntimeOptions(manifest.segment_threads(0), exclusive=True, precision=precision))
    serving = serving_of(manifest)
    if serving is not None:
        config = serving.openvino_config()
    (output / "openvino.json").write_text(json.dumps(config, indent=1))
    write_readme(output, "openvino", code_for("openvino", manifest), ["model.xml", "model.bin", "openvino.json"])
    return ["model.xml", "model.bin", "openvino.json", README]


WRITERS = {"onnxruntime": write_onnxruntime, "openvino": write_openvino}


#: The lines that read ``onnxruntime.json`` into session options, shared by every ONNX Runtime export's README.
ORT_OPTIONS = textwrap.dedent('''\
    config = json.load(open("onnxruntime.json"))
    options = ort.SessionOptions()
    options.intra_op_num_threads = config["intra_op_num_threads"]
    options.inter_op_num_threads = config["inter_op_num_threads"]
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, config["graph_optimization_level"])
    for key, value in config["session_config_entries"].items():
        options.add_session_config_entry(key, value)
    ''')  # fmt: skip


def snippet(target: str) -> str:
    """The lines that load and run the export with its runtime alone (``feeds``: input name -> numpy array)."""
    if target == "onnxruntime":
        return "import json, onnxruntime as ort\n" + ORT_OPTIONS + textwrap.dedent('''\
            session = ort.InferenceSession("model.onnx", options, providers=config["providers"])
            run = lambda feeds: session.run(None, feeds)  # feeds: {input name: numpy array}
            ''')  # fmt: skip
    if target == "openvino":
        return textwrap.dedent('''\
            import json, openvino as ov
            config = json.load(open("openvino.json"))
            compiled = ov.Core().compile_model("model.xml", "CPU", config)
            request = compiled.create_infer_request()
            # feeds: {input name: numpy array}
            run = lambda feeds: [request.infer(feeds)[output] for output in compiled.outputs]
            ''')  # fmt: skip
    return textwrap.dedent('''\
        import rlcompile
        plan = rlcompile.load(".")
        run = plan.run  # feeds: {input name: numpy array}
        ''')


def serving_snippet(target: str) -> str:
    """The lines that serve the export to several threads at once as the plan was measured (``--objective
    throughput``): ONNX Runtime's sessions taken in turn, or one OpenVINO infer request per thread."""
    if target == "onnxruntime":
        return "import itertools, json, onnxruntime as ort\n" + ORT_OPTIONS + textwrap.dedent('''\
            sessions = [ort.InferenceSession("model.onnx", options, providers=config["providers"])
                        for _ in range(config["sessions"])]
            turn = itertools.count()
            # call run from as many threads as requests are in flight: the sessions are taken in turn
            run = lambda feeds: sessions[next(turn) % len(sessions)].run(None, feeds)
            ''')  # fmt: skip
    return textwrap.dedent('''\
        import json, threading, openvino as ov
        config = json.load(open("openvino.json"))
        compiled = ov.Core().compile_model("model.xml", "CPU", config)
        local = threading.local()
        def run(feeds):  # call it from as many threads as requests are in flight: one infer request each
            if not hasattr(local, "request"):
                local.request = compiled.create_infer_request()
            results = local.request.infer(feeds, share_inputs=True)  # the inputs read in place
            return [results[output] for output in compiled.outputs]
        ''')  # fmt: skip


def write_readme(output: Path, target: str, code: str, files: list[str]) -> None:
    how = {"onnxruntime": "plain `onnxruntime` (and numpy); nothing else",
           "openvino": "plain `openvino` (and numpy); nothing else",
           "plan": "`pip install rlcompile` and the runtimes the plan's segments use"}[target]  # fmt: skip
    lines = [f"# Exported by rlcompile for {target}", "", f"Needs {how}. Files: {', '.join(files) or 'the plan'}.",
             "Run from this directory:", "", "```python", code.rstrip(), "outputs = run(feeds)", "```", ""]  # fmt: skip
    (output / README).write_text("\n".join(lines))


#: Runs in the fresh process: block the forbidden modules, run the README's lines, time ``run``.
HARNESS = '''
import importlib.abc, json, sys, time
FORBIDDEN = {forbidden!r}
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in FORBIDDEN:
            raise ImportError(f"{{name}} cannot be imported in this check")
sys.meta_path.insert(0, Refuse())
import numpy as np
with np.load({inputs_file!r}) as stored:
    cases = {{}}
    for key in stored.files:
        case, name = key.split(":", 1)
        cases.setdefault(int(case), {{}})[name] = stored[key]
cases = [cases[index] for index in sorted(cases)]
feeds = cases[0]
started = time.perf_counter()
exec(open("snippet.py").read())
imported = time.perf_counter()
outputs = run(feeds)
ran = time.perf_counter()
every = [outputs] + [run(case) for case in cases[1:]]
median_ms = None
if {latency}:
    samples, began = [], time.perf_counter()
    for _ in range({warmup}):
        run(feeds)
    while len(samples) < {repeats} or time.perf_counter() - began < {min_time}:
        before = time.perf_counter()
        run(feeds)
        samples.append((time.perf_counter() - before) * 1e3)
        if time.perf_counter() - began > {max_time}:
            break
    median_ms = float(np.median(samples))
per_s = None
if {concurrency}:
    import threading
    counts, release, clock = [0] * {concurrency}, threading.Barrier({concurrency} + 1), []
    def serve(slot):
        run(feeds)
        release.wait()
        counted, stop = clock[0] + {warmup_s}, clock[0] + {warmup_s} + {serve_s}
        while time.perf_counter() < stop:
            run(feeds)
            counts[slot] += time.perf_counter() >= counted
    workers = [threading.Thread(target=serve, args=(slot,)) for slot in range({concurrency})]
    for worker in workers:
        worker.start()
    clock.append(time.perf_counter())
    release.wait()
    for worker in workers:
        worker.join()
    per_s = sum(counts) / (time.perf_counter() - clock[0] - {warmup_s})
np.savez({outputs_file!r}, **{{f"{{k}}:{{i}}": np.asarray(o) for k, outs in enumerate(every)
                              for i, o in enumerate(outs)}})
loaded = sorted(m for m in sys.modules if m.split(".")[0] in FORBIDDEN)
print(json.dumps({{"median_ms": median_ms, "import_s": imported - started, "per_s": per_s,
                  "first_run_s": ran - imported, "loaded": loaded}}))
'''


def run_fresh(output: Path, target: str, cases: list[dict[str, np.ndarray]], timing: MeasureConfig,
              code: str | None = None, concurrency: int = 0, latency: bool = True,
              ) -> tuple[dict, list[list[np.ndarray]]]:  # fmt: skip
    """The export run by its runtime alone in a fresh process (``code``: the README's lines, by default the target's
    :func:`snippet`) on every one of ``cases``, the first timed (``latency``) and served with ``concurrency`` requests
    in flight (when given); (timings, each case's outputs)."""
    with tempfile.TemporaryDirectory(prefix="rlcompile-export-check-") as scratch:
        outputs_file, inputs_file = str(Path(scratch) / "outputs.npz"), str(Path(scratch) / "inputs.npz")
        np.savez(inputs_file, **{f"{k}:{name}": value for k, feeds in enumerate(cases)
                                 for name, value in feeds.items()})  # fmt: skip
        (Path(scratch) / "harness.py").write_text(HARNESS.format(
            forbidden=set(FORBIDDEN_MODULES), outputs_file=outputs_file, inputs_file=inputs_file, warmup=timing.warmup,
            repeats=timing.min_repeats, min_time=timing.min_time_s, max_time=timing.max_time_s,
            concurrency=concurrency, serve_s=SERVE_TIMES * timing.min_time_s,
            warmup_s=SERVE_TIMES * timing.min_time_s / 2,
            latency=latency))  # fmt: skip
        (output / "snippet.py").write_text(code or snippet(target))
        environment = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
        try:
            done = subprocess.run([sys.executable, "-I", str(Path(scratch) / "harness.py")], cwd=output,
                                  capture_output=True, text=True, env=environment, timeout=600)  # fmt: skip
        finally:
            (output / "snippet.py").unlink()
        if done.returncode != 0:
            lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
            raise RlcompileError(f"the export in {output} does not run with {target} alone: "
                                 f"{lines[-1] if lines else 'exit ' + str(done.returncode)}")  # fmt: skip
        with np.load(outputs_file) as stored:
            every = [[stored[f"{k}:{i}"] for i in range(sum(key.startswith(f"{k}:") for key in stored.files))]
                     for k in range(len(cases))]  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1]), every


def check_export(target: str, output: Path, plan, timing: MeasureConfig) -> ExportCheck:
    """Outputs of the export (fresh process) against the plan's reference; both timed, in turns (a throughput plan:
    both also serving its requests in flight, beside a twin of the plan)."""
    feeds = plan.reference_inputs
    serving = plan.record.serving if target != "plan" else None
    concurrency = serving["concurrency"] if serving else 0
    code = code_for(target, plan.record) if target != "plan" else None
    export_ms, plan_ms, first = [], [], None
    for _ in range(CHECK_ROUNDS):
        plan_ms.append(measure_latency(plan.timer(feeds), timing).median_ms)
        if target == "plan":
            from rlcompile.plan import load_plan

            copy = load_plan(output)
            result, outputs = {"median_ms": measure_latency(copy.timer(feeds), timing).median_ms, "import_s": 0.0,
                               "first_run_s": 0.0}, copy.run(feeds)  # fmt: skip
        else:
            result, every = run_fresh(output, target, [feeds], timing, code)
            outputs = every[0]
        export_ms.append(result["median_ms"])
        first = first or (result, outputs)
    result, outputs = first
    agreement = compare_outputs(plan.reference_outputs, outputs)
    if not agreement.within():
        raise RlcompileError(f"the export in {output} disagrees with the plan (max rel err {agreement.max_rel:.1e})")
    check = ExportCheck(agreement, float(np.median(export_ms)), float(np.median(plan_ms)), result["import_s"],
                        result["first_run_s"])  # fmt: skip
    return serving_check(check, output, target, plan, timing, code, concurrency) if concurrency else check


def serving_check(check: ExportCheck, output: Path, target: str, plan, timing: MeasureConfig, code: str,
                  concurrency: int) -> ExportCheck:  # fmt: skip
    """``check`` with the export's serving beside the plan's: each of :data:`SERVE_ROUNDS` rounds serves the plan's
    pool, the export (a fresh process), a second pool of the plan and the export again (a second fresh process), one
    after another. The ratio is the median over rounds of the exports' rate over the pools'; the noise the larger of
    the two twins' spreads (pool against pool, process against process, each the median over rounds)."""
    from rlcompile.measure.throughput import serve_block

    feeds, serve_s = plan.reference_inputs, SERVE_TIMES * timing.min_time_s
    pools = [[functools.partial(plan.serve(concurrency).run, feeds)] * concurrency for _ in range(2)]
    for callers in pools:
        serve_block(callers, serve_s / 2)  # its buffers allocated

    def pool_rate(callers) -> float:
        count, _, elapsed = serve_block(callers, serve_s)
        return count / elapsed

    def export_rate() -> float:
        return run_fresh(output, target, [feeds], timing, code, concurrency, latency=False)[0]["per_s"]

    # a round: plan, export, plan's twin, export's twin
    rates = np.array([[pool_rate(pools[0]), export_rate(), pool_rate(pools[1]), export_rate()]
                      for _ in range(SERVE_ROUNDS)])  # fmt: skip
    plan_rates, export_rates = rates[:, 0] + rates[:, 2], rates[:, 1] + rates[:, 3]
    noise = max(abs(np.median(rates[:, 2] / rates[:, 0]) - 1), abs(np.median(rates[:, 3] / rates[:, 1]) - 1))
    return replace(check, export_per_s=float(np.median(export_rates) / 2), plan_per_s=float(np.median(plan_rates) / 2),
                   serving_ratio=float(np.median(export_rates / plan_rates)), serving_noise=float(noise))
