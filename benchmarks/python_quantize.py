"""kvlab.quantize (Python) against the C++ benchmark, side by side in one run: the same
(32, 32768, 128) fp16 input size and presets as kvlab_bench_quantize (docs/PERFORMANCE.md),
on the same thread count and the same values: the C++ benchmark reads this script's input
(KVLAB_BENCH_INPUT, a temporary .npy). Repetitions alternate (one C++ process running every
preset once, then Python running every preset once, ...) so machine noise hits both.

    PYTHONPATH=build/bindings/python /usr/bin/python3 benchmarks/python_quantize.py \\
        --bench build/benchmarks/kvlab_bench_quantize [--presets kivi-2/K,kitty/K] [--threads 2] [--reps 5]

Prints per preset: C++ GB/s, Python GB/s (medians and ranges of the repetitions), their ratio,
the median and range of each repetition's own ratio, and on 1 thread the same by CPU time;
then, per call, each side's minor page faults and user and system CPU seconds (getrusage),
which separate the quantizer's work from first-touch faults of the fresh output arrays (both
sides allocate them per call) and from the machine. Allocation
experiments go through the environment of both processes, e.g. GLIBC_TUNABLES=glibc.malloc.hugetlb=1
(transparent huge pages for malloc); --no-numpy-hugepage stops numpy's own madvise of the input.
"""
import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import tempfile
import time

import numpy as np

SHAPE = (32, 32768, 128)


def cpp_rates(bench, names, threads, min_time, input_path):
    """One process of the C++ benchmark, one repetition of quantize/<name>/<threads> per name:
    {name: (GB/s of fp16 input by wall time, by the main thread's CPU time (equal to the
    process's on 1 thread), minor faults, user s, sys s per call)}."""
    filt = "^quantize/(" + "|".join(names) + f")/{threads}/"  # names checked in main (no regex characters)
    out = subprocess.run([bench, f"--benchmark_filter={filt}", "--benchmark_format=json",
                          f"--benchmark_min_time={min_time}"], capture_output=True, text=True, check=True,
                         env=dict(os.environ, KVLAB_BENCH_INPUT=input_path)).stdout
    rates = {}
    for r in json.loads(out)["benchmarks"]:
        if r.get("run_type") != "iteration":
            continue
        name = "/".join(r["name"].split("/")[1:3])
        assert name not in rates, f"{name}/{threads}: two runs"
        rates[name] = (r["bytes_per_second"] / 1e9, r["bytes_per_second"] * r["real_time"] / r["cpu_time"] / 1e9,
                       r.get("minflt", float("nan")), r.get("user_s", float("nan")), r.get("sys_s", float("nan")))
    assert sorted(rates) == sorted(names), f"C++ benchmark ran {sorted(rates)}, asked for {names}"
    return rates


def py_rate(kvlab, x, spec, min_time):
    """Calls of kvlab.quantize(x, spec) for at least min_time seconds: GB/s of fp16 input by wall
    time and by the process's CPU time (all threads), and per call minor faults, user and system
    seconds."""
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
    names = a.presets.split(",")
    for name in names:
        if not re.fullmatch(r"[\w-]+/[KV]", name):
            p.error(f"--presets: '{name}' is not <preset>/K or <preset>/V")
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
    specs = {}
    for name in names:
        preset, role = name.split("/")
        m = kvlab.Method(preset)
        specs[name] = m.key_quantizer if role == "K" else m.value_quantizer
        kvlab.quantize(x, specs[name])  # warm-up (Google Benchmark has none: its input is already touched)
    print(f"input {SHAPE} float16 ({x.nbytes / 1e6:.0f} MB, the same values on both sides), {a.threads} "
          f"thread(s), {a.reps} alternating repetitions of >= {a.min_time} s per preset; medians")
    with tempfile.TemporaryDirectory(prefix="kvlab_pyq_") as tmp:
        input_path = os.path.join(tmp, "x.npy")
        np.save(input_path, x)
        cpp, py = {n: [] for n in names}, {n: [] for n in names}
        for _ in range(a.reps):
            for name, r in cpp_rates(a.bench, names, a.threads, a.min_time, input_path).items():
                cpp[name].append(r)
            for name in names:
                py[name].append(py_rate(kvlab, x, specs[name], a.min_time))
    print(f"{'quantizer':12} {'C++ GB/s (min-max)':>20} {'Python GB/s (min-max)':>22} {'Python/C++':>11}"
          f" {'paired (min-max)':>18}" + ("  by CPU time: C++, Python, Python/C++" if a.threads == 1 else "")
          + "  spec")
    med = lambda rows, i: statistics.median(r[i] for r in rows)  # noqa: E731
    span = lambda v: f"{min(v):.3f}-{max(v):.3f}"  # noqa: E731
    for name in names:
        c, q = med(cpp[name], 0), med(py[name], 0)
        paired = [b[0] / a_[0] for a_, b in zip(cpp[name], py[name])]  # each repetition's Python / C++
        line = (f"{name:12} {c:7.3f} ({span([r[0] for r in cpp[name]]):>11}) {q:8.3f} "
                f"({span([r[0] for r in py[name]]):>11}) {q / c:11.3f} {statistics.median(paired):6.3f} "
                f"({span(paired):>11})")
        if a.threads == 1:  # Google Benchmark's CPU time is the main thread's: comparable on 1 thread only
            line += f"  {med(cpp[name], 1):6.3f} {med(py[name], 1):6.3f} {med(py[name], 1) / med(cpp[name], 1):6.3f}"
        print(line + f"  {specs[name]}")
        per = lambda rows: "/".join(f"{statistics.median(r[i] for r in rows):.4g}" for i in (2, 3, 4))  # noqa: E731
        print(f"{'':12} per call, minor faults/user s/sys s: C++ {per(cpp[name])}  Python {per(py[name])}")


if __name__ == "__main__":
    main()
