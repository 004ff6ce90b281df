"""kvlab.quantize (Python) against the C++ benchmark, side by side in one run: the same
(32, 32768, 128) fp16 input size and presets as kvlab_bench_quantize (docs/PERFORMANCE.md),
on the same thread counts and the same values: the C++ benchmark reads this script's input
(KVLAB_BENCH_INPUT, a temporary .npy). Each repetition runs one C++ process (every preset and
thread count, in the benchmark's order) and then the same calls, in the same order, in this
process, so machine noise hits both and each repetition gives its own Python/C++ ratio.

    PYTHONPATH=build/bindings/python /usr/bin/python3 benchmarks/python_quantize.py \\
        --bench build/benchmarks/kvlab_bench_quantize [--presets kivi-2/K,kitty/K] [--threads 1,2] [--reps 15]

Both sides time the same thing: one call of quantize per (preset, thread count) and
repetition (more while under --min-time), outputs allocated inside the call on both sides,
thread counts set with omp_set_num_threads on both sides (the C++ benchmark's ScopedThreads;
here through the libgomp that kvlab._kvlab loaded). Prints per (preset, threads): GB/s of fp16
input (medians and ranges), their ratio and the median and range of each repetition's ratio;
then per call and side (medians): the calling thread's and the OpenMP workers' time on a CPU
and waiting for one, the host's steal time, context switches, page faults and CPU seconds,
and how many distinct CPUs the calling thread and the worker used over the repetitions
(benchmarks/thread_stats.*). --log writes every repetition's figures as JSON lines.
--same-malloc gives both sides the same malloc policy (see SAME_MALLOC). --cpus pins both
sides to the same CPUs (this process's affinity, and the C++ processes'; OMP_PROC_BIND=close
over one place per CPU), so thread placement is the same on both sides. --max-seconds stops
starting repetitions after that long (the tables cover the repetitions done).
"""
import argparse
import ctypes
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

import thread_stats

SHAPE = (32, 32768, 128)
# --same-malloc: glibc keeps freed outputs below 32 MB (the 4 MB scale and zero arrays) for the
# next call in both processes. By default its dynamic mmap threshold does so in the C++ benchmark
# after its first call but not in this process (its heap's history differs): ~2,000 more page
# faults per call here. The 32 MiB codes reach glibc's largest mmap threshold: fresh pages on
# both sides.
SAME_MALLOC = "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=1073741824"
DIAG = ("main_run_ms", "main_wait_ms", "omp_run_ms", "omp_wait_ms", "steal_ms", "nivcsw", "nvcsw", "minflt",
        "user_s", "sys_s")


def cpp_rep(bench, names, threads, min_time, input_path, cpus):
    """One process of the C++ benchmark, one run of quantize/<name>/<t> per name and thread count:
    {(name, t): {"gbps": GB/s of fp16 input by wall time, and the DIAG counters, main_cpu, omp_cpu}}.
    cpus: the process's CPUs (None: this thread's)."""
    filt = "^quantize/(" + "|".join(names) + ")/(" + "|".join(map(str, threads)) + ")/"  # names checked in main
    bound = os.sched_getaffinity(0)
    if cpus:  # libgomp bound this thread to the first place; the child must get all of them
        os.sched_setaffinity(0, cpus)
    try:
        run = subprocess.run([bench, f"--benchmark_filter={filt}", "--benchmark_format=json",
                              f"--benchmark_min_time={min_time}"], capture_output=True, text=True,
                             env=dict(os.environ, KVLAB_BENCH_INPUT=input_path))
    finally:
        os.sched_setaffinity(0, bound)
    if run.returncode != 0:
        sys.exit(f"{bench} failed ({run.returncode}): {run.stderr.strip()[-2000:]}")
    out = {}
    for r in json.loads(run.stdout)["benchmarks"]:
        if r.get("run_type") != "iteration":
            continue
        parts = r["name"].split("/")
        key = ("/".join(parts[1:3]), int(parts[3]))
        assert key not in out, f"{key}: two runs"
        out[key] = dict({k: r.get(k, float("nan")) for k in DIAG + ("main_cpu", "omp_cpu")},
                        gbps=r["bytes_per_second"] / 1e9)
    want = {(n, t) for n in names for t in threads}
    assert set(out) == want, f"C++ benchmark ran {sorted(out)}, asked for {sorted(want)}"
    return out


def py_run(kvlab, x, spec, min_time):
    """Calls of kvlab.quantize(x, spec) until min_time has passed (at least one): GB/s of fp16
    input by wall time and the DIAG figures per call, as the C++ benchmark reports them."""
    t0, s0, u0 = thread_stats.thread_samples(), thread_stats.steal_ms(), resource.getrusage(resource.RUSAGE_SELF)
    n, start = 0, time.perf_counter()
    while True:
        kvlab.quantize(x, spec)
        n += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_time:
            break
    u1, s1 = resource.getrusage(resource.RUSAGE_SELF), thread_stats.steal_ms()
    d = thread_stats.thread_delta(t0, thread_stats.thread_samples())
    d.update(steal_ms=s1 - s0, nivcsw=u1.ru_nivcsw - u0.ru_nivcsw, nvcsw=u1.ru_nvcsw - u0.ru_nvcsw,
             minflt=u1.ru_minflt - u0.ru_minflt, user_s=u1.ru_utime - u0.ru_utime, sys_s=u1.ru_stime - u0.ru_stime)
    for k in DIAG:
        d[k] /= n
    d["gbps"] = n * x.nbytes / elapsed / 1e9
    return d


def openmp_runtime():
    """The OpenMP runtime kvlab._kvlab loaded (a ctypes handle) and every OpenMP/BLAS library
    mapped into this process, so two runtimes would show."""
    libs = sorted({line.split()[-1] for line in open("/proc/self/maps")
                   if re.search(r"gomp|iomp|libomp|blas", line.split()[-1])})
    gomp = [p for p in libs if "gomp" in os.path.basename(p)]
    if len(gomp) != 1:
        sys.exit(f"expected one libgomp in this process after loading kvlab._kvlab, found {gomp}")
    return ctypes.CDLL(gomp[0]), libs


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bench", required=True, help="kvlab_bench_quantize")
    p.add_argument("--presets", default="kivi-2/K,kivi-2/V,kitty/K", help="preset/K|V, comma-separated")
    p.add_argument("--threads", default="1,2", help="thread counts, comma-separated (the C++ benchmark has 1 and 2)")
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--min-time", type=float, default=0.01,
                   help="seconds per (preset, threads) and repetition, on each side (0.01: one call)")
    p.add_argument("--max-seconds", type=float, default=float("inf"), help="start no repetition after this long")
    p.add_argument("--cpus", default="", help="pin both sides to these CPUs, comma-separated (e.g. 2,3)")
    p.add_argument("--log", default="", help="write every repetition's figures here (JSON lines)")
    p.add_argument("--same-malloc", action="store_true",
                   help=f"run both sides with GLIBC_TUNABLES={SAME_MALLOC} (restarts this script with it)")
    p.add_argument("--no-numpy-hugepage", action="store_true",
                   help="numpy does not madvise(MADV_HUGEPAGE) the input (as the C++ side's std::vector)")
    a = p.parse_args()
    if a.same_malloc and os.environ.get("GLIBC_TUNABLES") != SAME_MALLOC:  # read by glibc at start only
        os.execve(sys.executable, [sys.executable] + sys.argv, dict(os.environ, GLIBC_TUNABLES=SAME_MALLOC))
    names = a.presets.split(",")
    for name in names:
        if not re.fullmatch(r"[\w-]+/[KV]", name):
            p.error(f"--presets: '{name}' is not <preset>/K or <preset>/V")
    try:
        threads = sorted({int(t) for t in a.threads.split(",")})  # the C++ benchmark's order
        cpus = [int(c) for c in a.cpus.split(",")] if a.cpus else []
    except ValueError:
        p.error(f"--threads '{a.threads}' / --cpus '{a.cpus}': comma-separated integers expected")
    if not set(threads) <= {1, 2}:
        p.error(f"--threads {a.threads}: the C++ benchmark registers 1 and 2 threads only")
    if cpus:  # before the OpenMP runtime starts: its threads and the C++ processes inherit this
        if len(cpus) < max(threads):
            p.error(f"--cpus {a.cpus}: fewer CPUs than threads ({max(threads)})")
        os.sched_setaffinity(0, cpus)
        os.environ.update(OMP_PROC_BIND="close", OMP_PLACES=",".join(f"{{{c}}}" for c in cpus))
    affinity = sorted(os.sched_getaffinity(0))  # libgomp narrows this thread's to its first place
    started = time.perf_counter()
    import kvlab
    from kvlab._ext import ext  # noqa: F401 (loads _kvlab and its OpenMP runtime)
    gomp, libs = openmp_runtime()
    if a.no_numpy_hugepage:
        core = getattr(np, "_core", None) or np.core
        core.multiarray._set_madvise_hugepage(False)
    print(f"Python {sys.version.split()[0]}, numpy {np.__version__}, madvise hugepage "
          f"{'off' if a.no_numpy_hugepage else 'numpy default'}, THP "
          f"{open('/sys/kernel/mm/transparent_hugepage/enabled').read().strip()}, "
          f"torch imported: {'torch' in sys.modules}, CPUs {affinity}, "
          f"GLIBC_TUNABLES={os.environ.get('GLIBC_TUNABLES', '')!r}, "
          f"OMP_PROC_BIND={os.environ.get('OMP_PROC_BIND', '')!r}, OMP_WAIT_POLICY="
          f"{os.environ.get('OMP_WAIT_POLICY', '')!r}, GOMP_SPINCOUNT={os.environ.get('GOMP_SPINCOUNT', '')!r}")
    print("OpenMP/BLAS libraries in this process:", ", ".join(libs))
    rng = np.random.default_rng(1)
    x = rng.standard_normal(SHAPE, dtype=np.float32).astype(np.float16)
    specs = {}
    for name in names:
        preset, role = name.split("/")
        m = kvlab.Method(preset)
        specs[name] = m.key_quantizer if role == "K" else m.value_quantizer
    for t in threads:  # starts OpenMP's workers (the C++ process starts them in its first 2-thread call)
        gomp.omp_set_num_threads(t)  # and grows the heap to the outputs' size once (--same-malloc keeps it)
        kvlab.quantize(x, specs[names[0]])
    print(f"threads of this process: {len(os.listdir('/proc/self/task'))}; input {SHAPE} float16 "
          f"({x.nbytes / 1e6:.0f} MB, the same values on both sides); threads {threads}; up to {a.reps} "
          f"alternating repetitions, min time {a.min_time} s per (preset, threads) and side")
    log = open(a.log, "w") if a.log else None
    cpp, py = {}, {}
    with tempfile.TemporaryDirectory(prefix="kvlab_pyq_") as tmp:
        input_path = os.path.join(tmp, "x.npy")
        np.save(input_path, x)
        for rep in range(a.reps):
            if time.perf_counter() - started > a.max_seconds:
                print(f"--max-seconds {a.max_seconds}: stopped after {rep} repetitions")
                break
            c = cpp_rep(a.bench, names, threads, a.min_time, input_path, cpus)
            for name in names:  # the C++ benchmark's order: preset by preset, 1 then 2 threads
                for t in threads:
                    gomp.omp_set_num_threads(t)
                    q = py_run(kvlab, x, specs[name], a.min_time)
                    cpp.setdefault((name, t), []).append(c[name, t])
                    py.setdefault((name, t), []).append(q)
                    if log:
                        log.write(json.dumps(dict(rep=rep, quantizer=name, threads=t, cpp=c[name, t], py=q)) + "\n")
    if not cpp:
        sys.exit("no repetition ran (--max-seconds too short for the setup)")
    report(names, threads, cpp, py, specs)


def report(names, threads, cpp, py, specs):
    med = lambda rows, k: statistics.median(r[k] for r in rows)  # noqa: E731
    span = lambda v: f"{min(v):.3f}-{max(v):.3f}"  # noqa: E731
    print(f"\n{'quantizer':10} {'thr':>3} {'reps':>4} {'C++ GB/s (min-max)':>20} {'Python GB/s (min-max)':>22} "
          f"{'Python/C++':>10} {'paired (min-max)':>18}  spec")
    for name in names:
        for t in threads:
            c, q = cpp[name, t], py[name, t]
            paired = [b["gbps"] / a_["gbps"] for a_, b in zip(c, q)]  # each repetition's Python / C++
            print(f"{name:10} {t:3} {len(c):4} {med(c, 'gbps'):7.3f} ({span([r['gbps'] for r in c]):>11}) "
                  f"{med(q, 'gbps'):8.3f} ({span([r['gbps'] for r in q]):>11}) {med(q, 'gbps') / med(c, 'gbps'):10.3f} "
                  f"{statistics.median(paired):6.3f} ({span(paired):>11})  {specs[name]}")
    print("\nper call, medians: the calling thread's and OpenMP workers' ms on a CPU / waiting for one, host steal ms,"
          "\ninvoluntary/voluntary context switches, minor faults, user/sys s; distinct (main, worker) CPUs over the reps")
    for name in names:
        for t in threads:
            for side, rows in (("C++", cpp[name, t]), ("Python", py[name, t])):
                cpus = sorted({(int(r["main_cpu"]), int(r["omp_cpu"])) for r in rows})
                print(f"{name:10} {t} {side:6} main {med(rows, 'main_run_ms'):6.1f}/{med(rows, 'main_wait_ms'):5.1f}"
                      f" omp {med(rows, 'omp_run_ms'):6.1f}/{med(rows, 'omp_wait_ms'):5.1f}"
                      f" steal {med(rows, 'steal_ms'):5.1f} cs {med(rows, 'nivcsw'):4.0f}/{med(rows, 'nvcsw'):4.0f}"
                      f" flt {med(rows, 'minflt'):6.0f} user/sys {med(rows, 'user_s'):.3f}/{med(rows, 'sys_s'):.3f}"
                      f" cpus {len(cpus)}: {cpus[:6]}")


if __name__ == "__main__":
    main()
