#!/usr/bin/python3
"""Bounds of docs/RELIABILITY.md, end to end: the kvlab CLI refuses every hostile input under
tests/fuzz/ (and /dev/zero) with exit status 1 and an error naming the file, within 1 s of CPU
time, with a peak RSS at most 64 MiB above the baseline (`kvlab methods`: the process that
only starts; for .pt files `kvlab info` on a valid .pt, as libtorch alone takes ~150 MB), and
never by running out of memory first.

  hostile_cli_test.py KVLAB WORKDIR
"""
import glob
import os
import struct
import subprocess
import sys
import time
import zlib

MIB = 1 << 20
SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FUZZ = os.path.join(SRC, "tests", "fuzz")


def run(cmd):
    """(exit status, stderr, peak RSS bytes, CPU seconds, wall seconds) of cmd and its children."""
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         env=dict(os.environ, OMP_NUM_THREADS="2"))
    err = p.stderr.read().decode(errors="replace")
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    return p.returncode, err, ru.ru_maxrss * 1024, ru.ru_utime + ru.ru_stime, time.monotonic() - t0


def write_zip_bomb(path, mib=3200):
    """A ~10 MB .npz whose q, k, v each inflate to `mib` MiB of float32 zeros, every CRC wrong (0):
    one block deflating 1 MiB of zeros, repeated (a full flush makes each block independent)."""
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = c.compress(bytes(1 << 20)) + c.flush(zlib.Z_FULL_FLUSH)
    header = b"{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, %d, 64), }" % (mib * 4096)
    header = b"\x93NUMPY\x01\x00" + struct.pack("<H", 118) + header.ljust(117) + b"\n"
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    data = c.compress(header) + c.flush(zlib.Z_FULL_FLUSH) + block * mib + b"\x03\x00"  # final empty block
    local, central = bytearray(), bytearray()
    for name in (b"q.npy", b"k.npy", b"v.npy"):
        common = struct.pack("<HHHHHIII", 20, 0, 8, 0, 0, 0, len(data), len(header) + (mib << 20))
        central += b"PK\x01\x02" + struct.pack("<H", 20) + common + struct.pack("<HHHHHII", len(name), 0, 0, 0, 0, 0,
                                                                                len(local)) + name
        local += b"PK\x03\x04" + common + struct.pack("<HH", len(name), 0) + name + data
    end = b"PK\x05\x06" + struct.pack("<HHHHIIH", 0, 0, 3, 3, len(central), len(local), 0)
    with open(path, "wb") as f:
        f.write(local + central + end)


def main():
    kvlab, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    tiny = os.path.join(work, "tiny.h5")
    subprocess.run([kvlab, "synth", "--preset", "tiny", "--tokens", "32", "--quiet", "--out", tiny], check=True)
    model = os.path.join(SRC, "data", "stories260K", "stories260K.bin")
    tok = os.path.join(SRC, "data", "stories260K", "tok512.bin")
    out = os.path.join(work, "out")
    cases = []
    # A decompression bomb at the size limit of the time bound: 10 MB claiming 9.4 GiB.
    bomb = os.path.join(work, "bomb.npz")
    write_zip_bomb(bomb)
    for cmd in ("info", "eval"):
        cases.append((bomb, [kvlab, cmd, bomb]))
    for f in sorted(glob.glob(os.path.join(FUZZ, "dump", "*")) + glob.glob(os.path.join(FUZZ, "zip", "*")) +
                    glob.glob(os.path.join(FUZZ, "npz", "*"))):
        cases.append((f, [kvlab, "info", f]))
        cases.append((f, [kvlab, "eval", f, "--methods", "kivi-2", "--quiet"]))
        cases.append((f, [kvlab, "boost-sweep", f, "--out", out + ".csv"]))
    for f in sorted(glob.glob(os.path.join(FUZZ, "codebook", "*"))):
        cases.append((f, [kvlab, "vq", "reorder", f, "--dump", tiny, "--reg-bytes", "256", "--smem-bytes", "1536",
                          "--out", out + ".h5"]))
        cases.append((f, [kvlab, "eval", tiny, "--methods", "vq:codebooks=" + f, "--quiet"]))
    for f in sorted(glob.glob(os.path.join(FUZZ, "npy", "*"))) + ["/dev/zero"]:
        cases.append((f, [kvlab, "quantize", "--input", f, "--quantizer", "bits=2,axis=channel,group=32",
                          "--out", out + ".npz"]))
        cases.append((f, [kvlab, "kmeans", "--input", f, "--k", "2", "--out", out + ".npz"]))
    for f in sorted(glob.glob(os.path.join(FUZZ, "llama2c", "*"))):
        cases.append((f, [kvlab, "dump", "--llama2c", f, "--tokenizer", tok, "--prompt", "a", "--out", out + ".h5"]))
    for f in sorted(glob.glob(os.path.join(FUZZ, "tokenizer", "*"))):
        cases.append((f, [kvlab, "dump", "--llama2c", model, "--tokenizer", f, "--prompt", "a", "--out", out + ".h5"]))

    _, _, base0, _, _ = run([kvlab, "methods"])
    # Opening a torch.save file loads libtorch (~150 MB): those are measured against a valid one.
    _, _, base_pt, cpu_pt, _ = run([kvlab, "info", os.path.join(SRC, "tests", "data", "torch", "stacked.pt")])
    print("baseline peak RSS: %.1f MiB (kvlab methods), %.1f MiB (kvlab info on a valid .pt)" %
          (base0 / MIB, base_pt / MIB))
    failures, worst_rss, worst_cpu, worst_wall = [], 0, 0.0, 0.0
    for f, cmd in cases:
        base = base_pt if f.endswith(".pt") else base0
        rc, err, rss, cpu, wall = run(cmd)
        if f.endswith(".pt"):
            cpu = max(0.0, cpu - cpu_pt)  # libtorch's start (~0.8 s) is the baseline's too
        worst_rss, worst_cpu, worst_wall = max(worst_rss, rss - base), max(worst_cpu, cpu), max(worst_wall, wall)
        name = os.path.relpath(f, SRC) if f.startswith(SRC) else f
        why = []
        if rc != 1:
            why.append("exit status %d" % rc)
        if f not in err:
            why.append("the error does not name the file")
        if "out of memory" in err or "bad_alloc" in err:
            why.append("it ran out of memory")
        if rss - base > 64 * MIB:
            why.append("peak RSS %.0f MiB above the baseline" % ((rss - base) / MIB))
        if cpu > 1.0:
            why.append("%.2f s of CPU time" % cpu)
        print("%-55s %-12s rc %d  +%5.1f MiB  cpu %.2f s  wall %.2f s" %
              (name, cmd[1], rc, (rss - base) / MIB, cpu, wall))
        if why:
            failures.append("%s (%s): %s\n    %s" % (name, " ".join(cmd[1:2]), ", ".join(why), err.strip()[-400:]))
    print("%d runs: worst peak RSS +%.1f MiB over the baseline, worst CPU %.2f s, worst wall %.2f s" %
          (len(cases), worst_rss / MIB, worst_cpu, worst_wall))
    for x in failures:
        print("FAIL " + x)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
