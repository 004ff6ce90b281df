#!/usr/bin/python3
"""The corrupted-dump corpus of issue 17: one-byte mutations of small HDF5 files, reproducible
from a seed, fed to the kvlab CLI. Every run must end by itself with status 0 (the mutation
was harmless) or 1 with an error naming the file: no crash, no hang.

  hdf5_mutants.py KVLAB WORKDIR [--count 700] [--seed 17] [--keep DIR] [--jobs 2]

Sources (made in WORKDIR by the kvlab under test): a compressed and an uncompressed synthetic
dump and a VQ codebook file. Mutant i takes source i % 3, a position, and either flips that
byte (XOR with 1..255) or inserts a byte there. Dumps go through `kvlab info` (metadata and
every key head), codebooks through `kvlab vq reorder`. --keep copies the mutants that crash
or hang (none are expected: tests/fuzz/ holds those that once did). With
KVLAB_PARSE_IN_PROCESS=1 in the environment libhdf5 runs inside kvlab, which shows its defects.
"""
import argparse
import concurrent.futures
import os
import random
import shutil
import signal
import subprocess
import sys
import time


def run(cmd, timeout):
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=timeout)
        return p.returncode, p.stderr.decode(errors="replace"), time.monotonic() - t0
    except subprocess.TimeoutExpired:
        return None, "", time.monotonic() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kvlab")
    ap.add_argument("workdir")
    ap.add_argument("--count", type=int, default=700)
    ap.add_argument("--seed", type=int, default=17)
    ap.add_argument("--keep")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=20.0)
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    w = lambda n: os.path.join(a.workdir, n)
    quiet = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    subprocess.run([a.kvlab, "synth", "--preset", "tiny", "--tokens", "64", "--quiet", "--out", w("c.h5")], **quiet)
    subprocess.run([a.kvlab, "synth", "--preset", "tiny", "--tokens", "32", "--layers", "1", "--k-pre-rope",
                    "--no-compress", "--quiet", "--out", w("u.h5")], **quiet)
    subprocess.run([a.kvlab, "vq", "train", w("c.h5"), "--spec", "CQ-4c4b", "--iters", "2", "--out", w("cb.h5")],
                   **quiet)
    sources = [open(w(n), "rb").read() for n in ("c.h5", "u.h5", "cb.h5")]
    rng = random.Random(a.seed)
    jobs = []
    for i in range(a.count):
        src = i % 3
        data = bytearray(sources[src])
        pos = rng.randrange(len(data))
        if rng.random() < 0.5:
            data[pos] ^= rng.randrange(1, 256)
            what = "flip"
        else:
            data.insert(pos, rng.randrange(256))
            what = "insert"
        path = w("m%04d.h5" % i)
        with open(path, "wb") as f:
            f.write(data)
        if src == 2:
            cmd = [a.kvlab, "vq", "reorder", path, "--dump", w("c.h5"), "--reg-bytes", "256", "--smem-bytes", "1536",
                   "--out", path + ".out"]
        else:
            cmd = [a.kvlab, "info", path]
        jobs.append((i, path, "%s at %d of source %d" % (what, pos, src), cmd))

    counts = {"accepted": 0, "rejected": 0, "crash": 0, "hang": 0, "unnamed": 0}
    slowest = 0.0
    bad = []
    with concurrent.futures.ThreadPoolExecutor(a.jobs) as ex:
        for (i, path, what, cmd), (rc, err, secs) in zip(jobs, ex.map(lambda j: run(j[3], a.timeout), jobs)):
            if rc is None:
                kind = "hang"
            elif rc == 0:
                kind = "accepted"
            elif rc == 1:
                kind = "rejected" if path in err else "unnamed"
                slowest = max(slowest, secs)
            else:
                kind = "crash"
            counts[kind] += 1
            if kind in ("crash", "hang", "unnamed"):
                sig = -rc if rc is not None and rc < 0 else None
                bad.append("m%04d (%s): %s%s %s" % (i, what, kind, " " + signal.Signals(sig).name if sig else "",
                                                     err.strip()[-300:]))
                if a.keep:
                    os.makedirs(a.keep, exist_ok=True)
                    shutil.copy(path, a.keep)
            else:
                os.remove(path)
            if os.path.exists(path + ".out"):
                os.remove(path + ".out")
    print("%d mutants (seed %d): %s; slowest rejection %.2f s" % (a.count, a.seed, counts, slowest))
    for b in bad:
        print("  " + b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
