"""Which machine and which libraries a result was made with, and refusing results made elsewhere.

Timings, tuning records and compiled code describe one CPU and one set of library versions. Every
saved result carries :func:`environment`; :func:`check_machine` refuses one made on another CPU (its
name *and* its signature: under a hypervisor a Zen 3 and a Zen 5 are both "AMD EPYC") or with other
versions of the libraries it runs. This module is on the ground floor: it imports no other part of
rlcompile but the errors.
"""

from __future__ import annotations

import datetime as _dt
import functools
import importlib.metadata
import os
import platform
from collections.abc import Sequence
from pathlib import Path

from rlcompile.errors import RlcompileError

#: Libraries whose versions change latencies; recorded with every result.
RECORDED_PACKAGES = (
    "rlcompile",
    "apache-tvm",
    "apache-tvm-ffi",
    "onnx",
    "onnxruntime",
    "openvino",
    "torch",
    "numpy",
    "xgboost-cpu",
)


#: Versions that must match for a saved plan's compiled segments and timings to hold.
PINNED_PACKAGES = ("onnxruntime", "openvino", "torch", "apache-tvm")


def process_age_s() -> float:
    """Seconds since this process started (0 where the system does not say): a budget given to a command counts
    from when the user started it, the interpreter's start and the imports included (on the 2-core VM in a slow
    spell, ~19 s before ``optimize`` reached its first stage)."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        started_s = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22, starttime, in clock ticks since boot
        uptime_s = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0
    return max(0.0, uptime_s - started_s)


def host_cores() -> int:
    """Cores this process may run on (respects CPU affinity and container limits)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


@functools.cache
def cpu_model() -> str:
    """The CPU's marketing name, read from /proc/cpuinfo (falls back to ``platform.processor``)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


#: The /proc/cpuinfo flags that change which kernels a compiler emits and how fast they run.
VECTOR_FLAGS = ("amx_tile", "avx512_bf16", "avx512_vnni", "avx512f", "avx2", "fma", "avx", "sse4_2", "neon", "asimd")


@functools.cache
def cpu_fields() -> dict[str, str]:
    """The first processor's entries in /proc/cpuinfo (they describe them all); empty where there is none."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if not line.strip():
                    break
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return fields


def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags (``avx512_bf16``, ``amx_tile``, ``avx512_vnni`` ...): what is detected, never assumed."""
    fields = cpu_fields()
    return frozenset((fields.get("flags") or fields.get("Features") or "").split())


#: Vector-ISA classes, widest first: what a kernel cost model learned on one class transfers within it.
ISA_CLASSES = ("avx512", "avx2", "generic")


def isa_class(flags: frozenset[str] | set[str] | None = None) -> str:
    """The vector-ISA class of a CPU from its flags (this CPU's when None): ``avx512`` (AVX-512F),
    ``avx2`` (AVX2 with FMA) or ``generic``. A Zen 4 and a Sapphire Rapids are both ``avx512``."""
    flags = cpu_flags() if flags is None else flags
    if "avx512f" in flags:
        return "avx512"
    return "avx2" if {"avx2", "fma"} <= set(flags) else "generic"


def isa_class_of_signature(signature: str) -> str:
    """:func:`isa_class` of a recorded :func:`cpu_signature` (it lists the vector extensions)."""
    return isa_class(frozenset(signature.split()))


@functools.cache
def cpu_signature() -> str:
    """What tells apart CPUs that share a marketing name (every EPYC under KVM is "AMD EPYC"): vendor,
    family, model and stepping, and the vector extensions present, e.g. ``AuthenticAMD 25/1/1 avx2 fma avx``.

    A Zen 5 and a Zen 3 both report "AMD EPYC"; only this shows that one has AVX-512 and the other not.
    """
    fields = cpu_fields()
    if not fields:
        return f"{platform.machine()} {platform.processor()}".strip()
    flags = cpu_flags()
    ident = "/".join(fields.get(k, "?") for k in ("cpu family", "model", "stepping"))
    vendor = fields.get("vendor_id") or fields.get("CPU implementer") or platform.machine()
    return " ".join([vendor, ident, *(flag for flag in VECTOR_FLAGS if flag in flags)])


def cpu_identity() -> str:
    """Name and signature together: what caches of timings are keyed by."""
    return f"{cpu_model()} | {cpu_signature()}"


def cpu_mismatch(saved: dict) -> str | None:
    """Why a result recorded in environment ``saved`` was not made on this CPU, or None if it was.

    Results recorded before the signature existed carry only the marketing name; that is compared alone.
    """
    if saved.get("cpu") != cpu_model():
        return f"made on {saved.get('cpu')!r}, this CPU is {cpu_model()!r}"
    if "cpu_signature" in saved and saved["cpu_signature"] != cpu_signature():
        return f"made on {saved['cpu_signature']!r}, this CPU is {cpu_signature()!r}"
    return None


def package_versions(names: Sequence[str] = RECORDED_PACKAGES) -> dict[str, str | None]:
    """Installed versions of the given distributions (``None`` when absent)."""
    versions: dict[str, str | None] = {}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def environment(threads: int | None = None) -> dict:
    """Metadata stored with every result: machine, thread count and library versions."""
    return {
        "cpu": cpu_model(),
        "cpu_signature": cpu_signature(),
        "cores": host_cores(),
        "threads": threads if threads is not None else host_cores(),
        "machine": platform.machine(),
        "system": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "packages": package_versions(),
        "recorded_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
    }


def check_machine(record: dict, path: str | Path, packages: Sequence[str] = PINNED_PACKAGES) -> None:
    """Refuse a saved result made on another CPU or with other versions of the libraries it runs."""
    saved = record.get("environment", {})
    if mismatch := cpu_mismatch(saved):
        raise RlcompileError(f"{path} was {mismatch}: make it here")
    here = package_versions(packages)
    for package in packages:
        if saved.get("packages", {}).get(package) != here[package]:
            raise RlcompileError(f"{path} was made with {package} {saved.get('packages', {}).get(package)}, "
                                 f"this environment has {here[package]}: make it again here")  # fmt: skip
