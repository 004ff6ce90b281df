#!/usr/bin/env python3
"""Compare the machine code (sm_90a SASS bytes) of every CUDA kernel of gpu/src between two
git revisions, without a GPU: a refactor that leaves a kernel's code byte-identical cannot
change the bytes it writes.

  python3 scripts/gpu_kernel_diff.py BASE [NEW] [--rename OLD=NEW ...] [--keep DIR]

BASE, NEW: git revisions (NEW defaults to the working tree). Each gpu/src/*.cu is compiled with
the flags of the kvlab_gpu target (-O3 --fmad=false -arch=sm_90a -std=c++17) to a cubin, and
the .text section of each kernel is compared; kernels are matched by demangled name after the
--rename substitutions (applied to BASE names) and with anonymous namespaces ignored. Prints
per file how many kernels are identical, differ, or exist on one side only; exit 1 if any
kernel present on both sides differs. Needs nvcc (PATH or /usr/local/cuda/bin) and c++filt.
"""
import argparse
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def nvcc():
    return shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"


def export_tree(rev, dest):
    os.makedirs(dest, exist_ok=True)
    if rev is None:  # the working tree
        for d in ("gpu", "core"):
            shutil.copytree(os.path.join(ROOT, d), os.path.join(dest, d), dirs_exist_ok=True)
        return
    archive = subprocess.run(["git", "-C", ROOT, "archive", rev, "gpu", "core"], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", dest], input=archive, check=True)


def compile_cubins(tree):
    src = os.path.join(tree, "gpu", "src")
    out = {}
    for f in sorted(os.listdir(src)):
        if not f.endswith(".cu"):
            continue
        cubin = os.path.join(tree, f + ".cubin")
        cmd = [nvcc(), "-cubin", "-arch=sm_90a", "-O3", "-DNDEBUG", "--fmad=false", "-std=c++17",
               "-I" + src, "-I" + os.path.join(tree, "gpu", "include"), "-I" + os.path.join(tree, "core", "include"),
               os.path.join(src, f), "-o", cubin]
        subprocess.run(cmd, check=True)
        out[f] = cubin
    return out


def kernel_text(path):
    """{mangled kernel name: bytes of its .text section} of an ELF64 cubin."""
    d = open(path, "rb").read()
    shoff, = struct.unpack_from("<Q", d, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", d, 0x3A)
    secs = [struct.unpack_from("<IIQQQQ", d, shoff + i * shentsize) for i in range(shnum)]
    strtab = secs[shstrndx][4]
    out = {}
    for name, typ, _flags, _addr, off, size in secs:
        n = d[strtab + name:d.index(b"\0", strtab + name)].decode()
        if n.startswith(".text."):
            out[n[6:]] = d[off:off + size]
    return out


def demangle(names):
    r = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True).stdout
    return dict(zip(names, r.split("\n")))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("base")
    ap.add_argument("new", nargs="?")
    ap.add_argument("--rename", action="append", default=[], help="OLD=NEW substitution on BASE kernel names")
    ap.add_argument("--keep", help="build in this folder and keep it")
    a = ap.parse_args()
    renames = [r.split("=", 1) for r in a.rename]
    work = a.keep or tempfile.mkdtemp(prefix="kvlab_kernel_diff_")
    export_tree(a.base, os.path.join(work, "base"))
    export_tree(a.new, os.path.join(work, "new"))
    base = compile_cubins(os.path.join(work, "base"))
    new = compile_cubins(os.path.join(work, "new"))

    def norm(s, ren):
        if ren:
            for old, nw in renames:
                s = s.replace(old, nw)
        return re.sub(r"\(anonymous namespace\)::", "", s)

    bad = 0
    for f in sorted(set(base) | set(new)):
        if f not in base or f not in new:
            print(f"{f}: only in {'base' if f in base else 'new'}")
            continue
        ka, kb = kernel_text(base[f]), kernel_text(new[f])
        da, db = demangle(list(ka)), demangle(list(kb))
        A = {norm(da[k], True): v for k, v in ka.items()}
        B = {norm(db[k], False): v for k, v in kb.items()}
        same = [k for k in A if k in B and A[k] == B[k]]
        diff = [k for k in A if k in B and A[k] != B[k]]
        only_a = [k for k in A if k not in B]
        only_b = [k for k in B if k not in A]
        print(f"{f}: {len(same)} identical, {len(diff)} differ, {len(only_a)} only in base, {len(only_b)} only in new")
        for k in diff:
            print("  differ:   ", k)
        for k in only_a:
            print("  only base:", k)
        for k in only_b:
            print("  only new: ", k)
        bad += len(diff)
    if not a.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
