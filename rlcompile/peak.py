"""This CPU's FP32 FMA peak and streaming bandwidth: the physical limits a kernel is judged against.

A latency says little across machines; a fraction of the machine's limit says whether a library has
left anything to win. Both are measured, never looked up, with the system C compiler and OpenMP at the
thread count asked for, best of 5 repetitions: the peak with independent fused multiply-add chains in the
widest vectors the CPU has (AVX-512 or AVX2, from its flags), the bandwidth with a STREAM triad
(``a = b + s * c``) over :data:`STREAM_MEGABYTES` of arrays, beyond a core's L2 as activations and weights
of a layer usually are. A program doing ``F`` FLOPs over ``B`` bytes can then reach at most
``min(peak, F / B x bandwidth)`` (the roofline). Both are measured once per CPU signature and thread count
and cached (``fma_peak.json`` in the tool's cache), so a run pays them once (~1 s).

Without a C compiler, or on a CPU with neither AVX-512 nor AVX2, there is no peak: callers go on
without it and say why (:class:`PeakUnknown`).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from rlcompile import atomic
from rlcompile.errors import RlcompileError
from rlcompile.machine import cpu_flags, cpu_signature

FMA_SOURCE = """
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#define CHAINS 12
int main(int argc, char **argv) {
  long iters = argc > 1 ? atol(argv[1]) : 100000000L; double best = 0; float sink = 0;
  for (int rep = 0; rep < 5; rep++) {
    double start = omp_get_wtime();
    #pragma omp parallel reduction(+:sink)
    {
      VEC acc[CHAINS]; VEC a = SET1(1.0000001f), b = SET1(0.9999999f);
      for (int c = 0; c < CHAINS; c++) acc[c] = SET1((float)c);
      for (long i = 0; i < iters; i++)
        for (int c = 0; c < CHAINS; c++) acc[c] = FMA(acc[c], a, b);
      float lanes[LANES];
      for (int c = 0; c < CHAINS; c++) { STORE(lanes, acc[c]); sink += lanes[0]; }
    }
    double gflops = 2.0 * LANES * CHAINS * iters * omp_get_max_threads() / (omp_get_wtime() - start) / 1e9;
    if (gflops > best) best = gflops;
  }
  printf("%.1f %g\\n", best, sink);
  return 0;
}
"""
STREAM_SOURCE = """
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
  long n = atol(argv[1]); double best = 0;
  float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float)), *c = malloc(n * sizeof(float));
  #pragma omp parallel for
  for (long i = 0; i < n; i++) { a[i] = 0.0f; b[i] = 1.0f; c[i] = 2.0f; }
  for (int rep = 0; rep < 6; rep++) {
    double start = omp_get_wtime();
    #pragma omp parallel for
    for (long i = 0; i < n; i++) a[i] = b[i] + 0.5f * c[i];
    double seconds = omp_get_wtime() - start;
    if (rep > 0 && 3.0 * n * sizeof(float) / seconds / 1e9 > best) best = 3.0 * n * sizeof(float) / seconds / 1e9;
  }
  printf("%.2f %g\\n", best, a[n / 2]);
  return 0;
}
"""
#: The triad's three arrays together (MB)
STREAM_MEGABYTES = 48
#: flag in /proc/cpuinfo -> C macros for that vector width, widest first
VECTORS = {
    "avx512f": "-DVEC=__m512 -DLANES=16 -DSET1=_mm512_set1_ps -DFMA=_mm512_fmadd_ps -DSTORE=_mm512_storeu_ps",
    "avx2": "-DVEC=__m256 -DLANES=8 -DSET1=_mm256_set1_ps -DFMA=_mm256_fmadd_ps -DSTORE=_mm256_storeu_ps",
}
#: FMA iterations per repetition: ~0.15 s per repetition on a 3 GHz core with two FMA units (enough for a
#: stable best of 5: within 1% of the benchmark's 5x longer loop here; 2e7 read 5% low)
QUICK_ITERATIONS = 50_000_000
CACHE_FILE = "fma_peak.json"


class PeakUnknown(RlcompileError):
    """The peak cannot be measured here (no C compiler, no AVX2/AVX-512, the loop failed)."""


@dataclass(frozen=True)
class Peak:
    """The measured FP32 FMA peak and streaming bandwidth at one thread count."""

    gflops: float
    threads: int
    isa: str
    #: GB/s of the STREAM triad (None in a cache written before it was measured)
    bandwidth_gbs: float | None = None

    def fraction(self, flops: float, seconds: float) -> float:
        """The fraction of this peak that ``flops`` done in ``seconds`` reach."""
        return flops / seconds / 1e9 / self.gflops

    def attainable_gflops(self, flops: float, bytes_moved: float) -> float:
        """The roofline: the most GFLOP/s a program of ``flops`` over ``bytes_moved`` can reach here."""
        if not self.bandwidth_gbs or bytes_moved <= 0:
            return self.gflops
        return min(self.gflops, flops / bytes_moved * self.bandwidth_gbs)


def vector_isa() -> str:
    """The widest vector extension the FMA loop can use on this CPU."""
    flags = cpu_flags()
    isa = next((name for name in VECTORS if name in flags), None)
    if isa is None:
        raise PeakUnknown("this CPU has neither AVX-512 nor AVX2; the FMA loop needs one of them")
    return isa


def run_c(source: str, flags: list[str], runs: list[tuple[list[str], int]]) -> list[float]:
    """Compile ``source`` and run it once per (arguments, threads); the first number each run prints."""
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        raise PeakUnknown("no C compiler (cc, gcc or clang) found to build the FMA loop")
    with tempfile.TemporaryDirectory() as scratch:
        path, binary = Path(scratch) / "loop.c", Path(scratch) / "loop"
        path.write_text(source)
        command = [compiler, "-O3", "-march=native", "-fopenmp", *flags, str(path), "-o", str(binary)]
        try:
            subprocess.run(command, check=True, capture_output=True, text=True, timeout=120)
            return [float(subprocess.run([str(binary), *arguments], env={"OMP_NUM_THREADS": str(threads)},
                                         capture_output=True, text=True, check=True, timeout=120).stdout.split()[0])
                    for arguments, threads in runs]  # fmt: skip
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError, ValueError) as error:
            raise PeakUnknown(f"the measuring loop could not be built or run ({type(error).__name__})") from None


def measure_fma_peak(threads: list[int], iterations: int = QUICK_ITERATIONS) -> dict[int, float]:
    """GFLOP/s of the FMA loop per thread count (best of 5 repetitions), in the widest vectors present."""
    flags = ["-funroll-all-loops", *VECTORS[vector_isa()].split()]
    source = "#include <stdlib.h>\n" + FMA_SOURCE
    return dict(zip(threads, run_c(source, flags, [([str(iterations)], count) for count in threads]), strict=True))


def measure_bandwidth(threads: int, megabytes: int = STREAM_MEGABYTES) -> float:
    """GB/s of the STREAM triad over ``megabytes`` of three float arrays (best of 5 after one warm-up)."""
    return run_c(STREAM_SOURCE, [], [([str(megabytes * 2**20 // 12)], threads)])[0]


def fma_peak(threads: int, cache_dir: Path) -> Peak:
    """This CPU's FMA peak and bandwidth at ``threads``, measured once per CPU signature, kept in ``cache_dir``.

    Raises :class:`PeakUnknown` when it cannot be measured here.
    """
    isa = vector_isa()
    path = cache_dir / CACHE_FILE
    try:
        saved = json.loads(path.read_text()) if path.exists() else {}
    except (OSError, ValueError):
        saved = {}
    key = f"{cpu_signature()} | {threads} threads"
    if not isinstance(saved.get(key), dict):
        saved[key] = {"gflops": measure_fma_peak([threads])[threads], "bandwidth_gbs": measure_bandwidth(threads)}
        with contextlib.suppress(OSError):  # a read-only cache: measured again next time
            atomic.write_json(path, saved, indent=1)
    return Peak(gflops=float(saved[key]["gflops"]), threads=threads, isa=isa,
                bandwidth_gbs=float(saved[key]["bandwidth_gbs"]))  # fmt: skip
