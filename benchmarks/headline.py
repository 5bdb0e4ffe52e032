"""The README's headline table, computed from the committed benchmark outputs under ``results/``.

    python benchmarks/headline.py            # print the table (markdown)
    python benchmarks/headline.py --write    # and put it into README.md between its headline markers

Every figure in the table comes from one JSON file named in its row, written by the benchmark command named
there; ``tests/test_docs.py`` checks that README.md holds exactly this table.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
START, END = "<!-- headline:start -->", "<!-- headline:end -->"

OPTIMIZE_JSON = "results/optimize/optimize.json"
OPTIMIZE_COMMAND = "python benchmarks/optimize.py --models resnet50,ocr-det,mobilenet_v2 --budget 4m"
PRECISION_JSON = "results/precision/zen5/precision.json"
PRECISION_COMMAND = "python benchmarks/precision.py --out results/precision/zen5"
CORPUS_JSON = "results/real_world/real_world.json"
CORPUS_COMMAND = "python benchmarks/real_world.py"
SHAPES_JSON = "results/shapes/zen4/shapes.json"
SHAPES_COMMAND = "python benchmarks/shapes.py --out results/shapes/zen4"
THROUGHPUT_JSON = "results/throughput/zen4/throughput.json"
THROUGHPUT_COMMAND = "python benchmarks/throughput.py --out results/throughput/zen4"


def load(path: str) -> dict:
    return json.loads((ROOT / path).read_text())


def machine_words(signature: str) -> str:
    """A CPU signature as a reader knows it: vendor and the vector extensions that matter here."""
    vendor = "Intel Xeon" if signature.startswith("GenuineIntel") else "AMD EPYC"
    extensions = [name for name in ("amx_tile", "avx512_bf16", "avx512_vnni", "avx512f", "avx2") if name in signature]
    return f"2-core {vendor} ({', '.join(extensions[:2])})"


def optimize_rows() -> list[list[str]]:
    """``optimize`` in fp32 at a 4-minute budget: against ONNX Runtime native and against the faster native."""
    data = load(OPTIMIZE_JSON)
    where = machine_words(data["environment"]["cpu_signature"])
    rows = []
    for name, run in data["models"].items():
        faster = min(run["ort_native_ms"], run["openvino_native_ms"])
        figure = (f"{run['ort_native_ms'] / run['final_ms']:.2f}x as fast as ONNX Runtime, "
                  f"{faster / run['final_ms']:.2f}x the faster native ({run['final_ms']:.1f} ms)")  # fmt: skip
        rows.append([f"`optimize {name} --budget 4m` (fp32)", figure, where, OPTIMIZE_JSON, OPTIMIZE_COMMAND])
    return rows


def precision_rows() -> list[list[str]]:
    """``--precision auto`` within tolerance 0.01 on held-out data, against the fastest fp32 native and NNCF: every
    model of the benchmark, on one machine."""
    data = load(PRECISION_JSON)
    where = machine_words(data["machine"]["signature"])
    rows = []
    for name, model in data["models"].items():
        plans = {row["plan"]: row for row in model["rows"]}
        ours = plans[model["chosen"]]
        nncf = [row for plan, row in plans.items() if plan.startswith("nncf")]
        nncf_words = "NNCF: none ran"
        if nncf:
            best = min(nncf, key=lambda row: row["ms"])
            nncf_words = (f"NNCF {best['vs_fp32']:.2f}x" if best["within"]
                          else f"NNCF {best['vs_fp32']:.2f}x but outside the tolerance")  # fmt: skip
        figure = f"{ours['vs_fp32']:.2f}x the fastest fp32 time ({nncf_words})"
        rows.append([f"`--precision auto` on {name}", figure, where, PRECISION_JSON, PRECISION_COMMAND])
    return rows


def corpus_rows() -> list[list[str]]:
    """Every command on every corpus model: how many ended with exit 0 (its JSON records no machine: none is named)."""
    data = load(CORPUS_JSON)
    models = {key.rsplit("/", 1)[0] for key in data}
    ran = {}
    for key, outcome in data.items():
        command = key.rsplit("/", 1)[1]
        done, total = ran.get(command, (0, 0))
        ran[command] = (done + (outcome.get("status") == 0), total + 1)
    words = ", ".join(f"{command} {done}/{total}" for command, (done, total) in sorted(ran.items()))
    figure = f"{len(models)} real models, exit 0: {words} (the rest one line, exit 2)"
    rows = [["every command on the corpus", figure, None, CORPUS_JSON, CORPUS_COMMAND]]
    outside = [row["outside"] for row in data.values() if "plan_over_faster_native" in (row.get("outside") or {})]
    if outside:
        ratios = [o["plan_over_faster_native"] for o in outside]
        within = sum(not o["slower"] for o in outside)
        figure = (f"{within} of {len(outside)} `optimize`/`select` outputs at or below the faster fp32 native "
                  f"beyond its twins' spread; {min(ratios):.2f}-{max(ratios):.2f}x it")
        rows.append(["outputs timed from outside (fresh process, both natives)", figure, None, CORPUS_JSON,
                     CORPUS_COMMAND])  # fmt: skip
    return rows



def shapes_rows() -> list[list[str]]:
    """Plans for shape profiles: each model's fp32 and ``--precision auto`` plans over the faster native at every shape
    of its grid (the machine is the run's, named with the JSON)."""
    data = load(SHAPES_JSON)
    where = f"2-core {data['machine']['cpu'].split()[0]} {data['machine']['cpu'].split()[1]}"
    rows = []
    for name, entry in data["models"].items():
        ratios = {plan: [row["ms"][f"plan {plan}"] / min(row["ms"]["ort native"], row["ms"]["openvino native"])
                         for row in entry["grid"]] for plan in ("fp32", "auto")}  # fmt: skip
        figure = (f"at each of {len(entry['grid'])} shapes: fp32 {min(ratios['fp32']):.2f}-{max(ratios['fp32']):.2f}x, "
                  f"auto {min(ratios['auto']):.2f}-{max(ratios['auto']):.2f}x the faster native")  # fmt: skip
        profile = entry["profile"][0].split("=", 1)[1].replace("|", "\\|")
        rows.append([f"shape profile `{profile}` on {name}", figure, where, SHAPES_JSON, SHAPES_COMMAND])
    return rows


def throughput_rows() -> list[list[str]]:
    """``--objective throughput``: each model's plans over the best native serving configuration."""
    data = load(THROUGHPUT_JSON)
    where = f"2-core {data['machine']['cpu'].split()[0]} {data['machine']['cpu'].split()[1]}"
    rows = []
    for name, entry in data["models"].items():
        servers, best = entry["contest"]["servers"], entry["contest"]["best_native"]
        ratio = {plan: servers[f"plan {plan}"]["per_s"] / servers[best]["per_s"] for plan in ("fp32", "auto")}
        figure = (f"fp32 {ratio['fp32']:.2f}x, auto {ratio['auto']:.2f}x the inferences/s of the best native serving "
                  f"configuration ({best.replace(' native:', '')}; twins {100 * entry['contest']['noise']:.1f}%)")
        rows.append([f"`--objective throughput`, {entry['concurrency']} in flight, on {name}", figure, where,
                     THROUGHPUT_JSON, THROUGHPUT_COMMAND])  # fmt: skip
    return rows


def table() -> str:
    """The headline table as markdown, between the README's markers."""
    lines = ["| result | figure | JSON |", "|---|---|---|"]
    sources: dict[str, tuple[str, str | None]] = {}
    for what, figure, where, path, command in (optimize_rows() + precision_rows() + shapes_rows() + throughput_rows()
                                               + corpus_rows()):  # fmt: skip
        lines.append(f"| {what} | {figure} | [{Path(path).parent.name}/{Path(path).name}]({path}) |")
        sources[path] = (command, where)
    lines.append("")
    lines += [f"- [{path}]({path}): `{command}`" + (f" on a {where}" if where else "")
              for path, (command, where) in sources.items()]
    return "\n".join([START, *lines, END])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="replace the table in README.md")
    args = parser.parse_args()
    text = table()
    print(text)
    if args.write:
        readme = ROOT / "README.md"
        current = readme.read_text()
        before, rest = current.split(START, 1)
        after = rest.split(END, 1)[1]
        readme.write_text(before + text + after)


if __name__ == "__main__":
    main()
