"""A shape profile's report: ``report.md`` with the variants kept and, per bucket, the plan against both natives,
written from the manifest alone (its ``shapes`` record)."""

from __future__ import annotations

from pathlib import Path

from rlcompile.manifest import Manifest
from rlcompile.report.optimize import REPORT, markdown_table


def bucket_rows(manifest: Manifest) -> list[list[object]]:
    """Per bucket: weight, the variant serving it, its ms, each native's ms, ratio to the faster, twins' spread, and
    for a plan below fp32 the serving variant's error there."""
    rows = []
    errors = {entry["bucket"]["label"]: entry["errors"] for entry in manifest.shapes["buckets"]}
    for row in manifest.shapes["per_bucket"]:
        natives = row["natives"]
        cells = [row["bucket"], f"{row['weight']:.3f}", row["variant"], f"{row['ms']:.3f}",
                 f"{natives.get('ort', float('nan')):.3f}", f"{natives.get('openvino', float('nan')):.3f}",
                 f"{row['ratio']:.3f}x", f"{100 * row['noise']:.1f}%"]  # fmt: skip
        if manifest.accuracy is not None:
            error = errors.get(row["bucket"], {}).get(row["variant"])
            cells.append("fp32" if error is None else f"{error:.4g}")
        rows.append(cells)
    return rows


def bucket_header(manifest: Manifest) -> list[str]:
    header = ["bucket", "weight", "served by", "ms", "ORT native ms", "OpenVINO native ms", "ratio to faster native",
              "twins"]  # fmt: skip
    return header + ([f"error ({manifest.accuracy.metric})"] if manifest.accuracy is not None else [])


def shapes_lines(manifest: Manifest) -> list[str]:
    shapes = manifest.shapes
    weighted = shapes["weighted_ms"]
    lines = [f"# {manifest.model}: a plan for a shape profile", "",
             f"Weighted latency {weighted['plan']:.3f} ms against the faster native's {weighted['faster_native']:.3f} "
             f"ms per bucket ({shapes['ratio']:.3f}x); ONNX Runtime native {weighted.get('ort', float('nan')):.3f} ms, "
             f"OpenVINO native {weighted.get('openvino', float('nan')):.3f} ms.", "", "## Variants", ""]  # fmt: skip
    for entry in shapes["variants"]:
        regions = "; ".join(", ".join(f"{axis} {low}-{high}" for axis, (low, high) in region.items())
                            for region in entry["regions"])  # fmt: skip
        lines.append(f"- `{entry['file']}`: {entry['label']}, serves {regions}")
    lines += ["", "## Per bucket", ""]
    lines += markdown_table(bucket_header(manifest), bucket_rows(manifest))
    if manifest.accuracy is not None:
        accuracy = manifest.accuracy
        lines += ["", f"Accuracy: {accuracy.metric} {accuracy.error:.4g} at the worst bucket (fp32 "
                      f"{accuracy.fp32_error:.4g}, tolerance {accuracy.tolerance:g}), on "
                      f"{accuracy.validation_samples} held-out samples brought to each bucket's shape."]  # fmt: skip
    return lines


def write_shapes_report(output: Path, manifest: Manifest) -> Path:
    path = Path(output) / REPORT
    path.write_text("\n".join(shapes_lines(manifest)) + "\n")
    return path
