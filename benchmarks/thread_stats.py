"""Where a benchmark's time goes, per thread of this process: the Python twin of
benchmarks/thread_stats.h (the same /proc files, the same meaning), so python_quantize.py can
compare kvlab.quantize with the C++ benchmark thread by thread. Missing files read as zeros."""
import os
import threading


def thread_samples():
    """{thread id: (ms on a CPU, ms runnable but waiting for one, CPU it last ran on)}."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        run = wait = 0.0
        cpu = -1
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                r, w = f.read().split()[:2]
                run, wait = int(r) / 1e6, int(w) / 1e6
            with open(f"/proc/self/task/{tid}/stat") as f:
                cpu = int(f.read().rsplit(")", 1)[1].split()[36])  # field 39, counted after the name
        except (OSError, ValueError, IndexError):
            pass  # a thread that ended while we read, or no schedstat
        out[int(tid)] = (run, wait, cpu)
    return out


def steal_ms():
    """Steal time of all CPUs so far, ms (the 8th value of /proc/stat's "cpu" line)."""
    try:
        with open("/proc/stat") as f:
            v = f.readline().split()
        return int(v[8]) * 1000.0 / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def thread_delta(a, b):
    """The calling thread's and the other threads' run and wait ms between two samples, and the
    CPU the caller and the busiest other thread last ran on (as thread_stats.h)."""
    me = threading.get_native_id()
    d = dict(main_run_ms=0.0, main_wait_ms=0.0, omp_run_ms=0.0, omp_wait_ms=0.0, main_cpu=-1, omp_cpu=-1)
    busiest = 0.0  # an idle thread's CPU says nothing
    for tid, (run1, wait1, cpu) in b.items():
        run0, wait0, _ = a.get(tid, (0.0, 0.0, -1))  # a thread started in between
        run, wait = run1 - run0, wait1 - wait0
        if tid == me:
            d.update(main_run_ms=run, main_wait_ms=wait, main_cpu=cpu)
        else:
            d["omp_run_ms"] += run
            d["omp_wait_ms"] += wait
            if run > busiest:
                busiest, d["omp_cpu"] = run, cpu
    return d
