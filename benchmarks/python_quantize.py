"""kvlab.quantize (Python) against the C++ benchmark, side by side in one run: the same
(32, 32768, 128) fp16 input size and presets as kvlab_bench_quantize (docs/PERFORMANCE.md),
on the same thread count. Runs alternate (C++, Python, C++, ...) so machine noise hits both.

    PYTHONPATH=build/bindings/python /usr/bin/python3 benchmarks/python_quantize.py \\
        --bench build/benchmarks/kvlab_bench_quantize [--presets kivi-2/K,kitty/K] [--threads 2] [--reps 5]

Prints per preset: C++ GB/s, Python GB/s (medians and ranges of the repetitions) and their ratio,
and on 1 thread the same by CPU time; then, per call, each side's minor page faults and user and
system CPU seconds (getrusage), which separate the quantizer's work from first-touch faults of
the fresh output arrays (both sides allocate them per call) and from the machine. Allocation
experiments go through the environment of both processes, e.g. GLIBC_TUNABLES=glibc.malloc.hugetlb=1
(transparent huge pages for malloc); --no-numpy-hugepage stops numpy's own madvise of the input.
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import time

import numpy as np

SHAPE = (32, 32768, 128)


def cpp_rate(bench, name, threads, min_time):
    """One Google Benchmark repetition of quantize/<name>/<threads>: GB/s of fp16 input by wall
    time, and by the main thread's CPU time (equal to the process's on 1 thread)."""
    out = subprocess.run([bench, f"--benchmark_filter=^quantize/{name}/{threads}/", "--benchmark_format=json",
                          f"--benchmark_min_time={min_time}"], capture_output=True, text=True, check=True).stdout
    runs = [b for b in json.loads(out)["benchmarks"] if b.get("run_type") == "iteration"]
    assert len(runs) == 1, f"{name}/{threads}: {len(runs)} runs"
    r = runs[0]
    return (r["bytes_per_second"] / 1e9, r["bytes_per_second"] * r["real_time"] / r["cpu_time"] / 1e9,
            r.get("minflt", float("nan")), r.get("user_s", float("nan")), r.get("sys_s", float("nan")))


def py_rate(kvlab, x, spec, min_time):
    """Calls of kvlab.quantize(x, spec) for at least min_time seconds: GB/s of fp16 input by wall
    time and by the process's CPU time (all threads), and per call minor faults, user and system
    seconds."""
    kvlab.quantize(x, spec)  # warm-up, as Google Benchmark's first iteration
    u0 = resource.getrusage(resource.RUSAGE_SELF)
    n, start, cpu = 0, time.perf_counter(), time.process_time()
    while True:
        kvlab.quantize(x, spec)
        n += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_time:
            u1 = resource.getrusage(resource.RUSAGE_SELF)
            return (n * x.nbytes / elapsed / 1e9, n * x.nbytes / (time.process_time() - cpu) / 1e9,
                    (u1.ru_minflt - u0.ru_minflt) / n, (u1.ru_utime - u0.ru_utime) / n,
                    (u1.ru_stime - u0.ru_stime) / n)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bench", required=True, help="kvlab_bench_quantize")
    p.add_argument("--presets", default="kivi-2/K,kivi-2/V,kitty/K", help="preset/K|V, comma-separated")
    p.add_argument("--threads", type=int, default=2, help="1 or 2 (the C++ benchmark's arguments)")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--min-time", type=float, default=1.0, help="seconds per repetition")
    p.add_argument("--no-numpy-hugepage", action="store_true",
                   help="numpy does not madvise(MADV_HUGEPAGE) the input (as the C++ side's std::vector)")
    a = p.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(a.threads)  # before the OpenMP runtime starts
    import kvlab
    if a.no_numpy_hugepage:
        core = getattr(np, "_core", None) or np.core
        core.multiarray._set_madvise_hugepage(False)
    print(f"numpy {np.__version__}, madvise hugepage {'off' if a.no_numpy_hugepage else 'numpy default'}, "
          f"GLIBC_TUNABLES={os.environ.get('GLIBC_TUNABLES', '')!r}, "
          f"THP {open('/sys/kernel/mm/transparent_hugepage/enabled').read().strip()}")
    rng = np.random.default_rng(1)
    x = rng.standard_normal(SHAPE, dtype=np.float32).astype(np.float16)
    print(f"input {SHAPE} float16 ({x.nbytes / 1e6:.0f} MB), {a.threads} thread(s), {a.reps} alternating "
          f"repetitions of >= {a.min_time} s; medians")
    print(f"{'quantizer':12} {'C++ GB/s (min-max)':>20} {'Python GB/s (min-max)':>22} {'Python/C++':>11}"
          + ("  by CPU time: C++, Python, Python/C++" if a.threads == 1 else "") + "  spec")
    for name in a.presets.split(","):
        preset, role = name.split("/")
        m = kvlab.Method(preset)
        spec = m.key_quantizer if role == "K" else m.value_quantizer
        cpp, py = [], []
        for _ in range(a.reps):
            cpp.append(cpp_rate(a.bench, name, a.threads, a.min_time))
            py.append(py_rate(kvlab, x, spec, a.min_time))
        med = lambda rows, i: statistics.median(r[i] for r in rows)  # noqa: E731
        span = lambda rows: f"{min(r[0] for r in rows):.3f}-{max(r[0] for r in rows):.3f}"  # noqa: E731
        c, q = med(cpp, 0), med(py, 0)
        line = f"{name:12} {c:7.3f} ({span(cpp):>11}) {q:8.3f} ({span(py):>11}) {q / c:11.3f}"
        if a.threads == 1:  # Google Benchmark's CPU time is the main thread's: comparable on 1 thread only
            line += f"  {med(cpp, 1):6.3f} {med(py, 1):6.3f} {med(py, 1) / med(cpp, 1):6.3f}"
        print(line + f"  {spec}")
        per = lambda rows: "/".join(f"{statistics.median(r[i] for r in rows):.4g}" for i in (2, 3, 4))  # noqa: E731
        print(f"{'':12} per call, minor faults/user s/sys s: C++ {per(cpp)}  Python {per(py)}")


if __name__ == "__main__":
    main()
