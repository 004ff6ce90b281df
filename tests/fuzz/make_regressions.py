#!/usr/bin/python3
"""Writes the hostile inputs of issue 17 as regression files under tests/fuzz/<target>/.

Each once crashed kvlab, hung it or made it allocate gigabytes; the fuzz_replay_* ctests feed
them to the fuzz targets, and tests/io/hostile_cli_test.py to the CLI under a memory limit.
Run from anywhere: /usr/bin/python3 tests/fuzz/make_regressions.py
"""
import io
import json
import os
import re
import struct
import zipfile
import zlib

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def out(target, name):
    os.makedirs(os.path.join(HERE, target), exist_ok=True)
    return os.path.join(HERE, target, name)


def npy_bytes(shape, descr="<f2", data=b"\0" * 64):
    header = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape)
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + data


def entry(name):
    return zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))  # the same bytes on every run


def npz(path, members):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for name, data in members.items():
            z.writestr(entry(name + ".npy"), data)


# (5, 8, 2^59, 8): the element count wraps to 0 in 64 bits (gather_scaled, token_slice SIGSEGV).
overflow = "(5, 8, %d, 8)" % 2**59
with open(out("npy", "overflow_shape.npy"), "wb") as f:
    f.write(npy_bytes(overflow))
npz(out("dump", "overflow_shape.npz"), {r: npy_bytes(overflow) for r in "qkv"})

# A per-layer name claiming layer 999999999: the layer table must not be sized from it.
good = np.zeros((1, 4, 8), np.float16)
buf = io.BytesIO()
np.save(buf, good)
npz(out("dump", "layer_999999999.npz"), {"layer_999999999_q": buf.getvalue(), "layer_0_k": buf.getvalue()})

# A stored ZIP member claiming 0xFFFFFFF0 bytes (4 GB allocation before the error).
z = bytearray()
with io.BytesIO() as b:
    npz(b, {"q": npy_bytes("(4,)")})
    z = bytearray(b.getvalue())
cd = z.rfind(b"PK\x01\x02")
z[cd + 24:cd + 28] = struct.pack("<I", 0xFFFFFFF0)
with open(out("zip", "member_claims_4gb.zip"), "wb") as f:
    f.write(z)
# The same claim on a deflated member.
with io.BytesIO() as b:
    with zipfile.ZipFile(b, "w", zipfile.ZIP_DEFLATED) as zz:
        zz.writestr(entry("q.npy"), npy_bytes("(4,)"), zipfile.ZIP_DEFLATED)
    z = bytearray(b.getvalue())
cd = z.rfind(b"PK\x01\x02")
z[cd + 24:cd + 28] = struct.pack("<I", 0xFFFFFFF0)
with open(out("npz", "deflated_member_claims_4gb.npz"), "wb") as f:
    f.write(z)

# q, k and v all pointing at one stored member's bytes: the overlapping-member ZIP bomb (many
# entries inflating the same data) must be refused from the directory alone.
with io.BytesIO() as b:
    npz(b, {"q": npy_bytes("(1, 1, 4, 8)")})
    z = bytearray(b.getvalue())
cd, end = z.rfind(b"PK\x01\x02"), z.rfind(b"PK\x05\x06")
central = b"".join(z[cd:end].replace(b"q.npy", r + b".npy") for r in (b"q", b"k", b"v"))
with open(out("npz", "members_share_bytes.npz"), "wb") as f:
    f.write(z[:cd] + central + b"PK\x05\x06" + struct.pack("<HHHHIIH", 0, 0, 3, 3, len(central), cd, 0))

with open(out("dump", "empty.zip"), "wb") as f:
    f.write(b"PK\x05\x06" + b"\0" * 18)

# A stacked .npz whose member's last byte is flipped: the CRC must catch it on every command.
arr = np.ones((1, 1, 4, 8), np.float16)
buf = io.BytesIO()
np.save(buf, arr)
members = {r: buf.getvalue() for r in "qkv"}
with io.BytesIO() as b:
    npz(b, members)
    z = bytearray(b.getvalue())
first = z.find(b"\x93NUMPY")
z[first + len(buf.getvalue()) - 1] ^= 0x01
with open(out("dump", "stacked_bad_crc.npz"), "wb") as f:
    f.write(z)

# An HDF5 dump whose datasets declare 1e11 tokens (chunked, nothing stored: bad_alloc).
def dump_attrs(f, tokens):
    f.attrs.update(format="kvlab-kv-dump", format_version=1, model="huge", num_layers=1, num_q_heads=1,
                   num_kv_heads=1, head_dim=8, num_tokens=tokens, rope_theta=10000.0,
                   rope_style="adjacent", dtype="float16", k_after_rope=1)


with h5py.File(out("dump", "huge_tokens.h5"), "w", libver="earliest") as f:
    dump_attrs(f, 10**11)
    for r in "qkv":
        f.create_dataset("layers/0/" + r, shape=(1, 10**11, 8), dtype=np.float16, chunks=(1, 1024, 8))

# A codebook file whose spec says 2 stages while its stages attribute says 1 (heap corruption
# in vq reorder, nondeterministic eval numbers).
with h5py.File(out("codebook", "spec_disagrees_with_stages.h5"), "w", libver="earliest") as f:
    f.attrs.update(format="kvlab-vq-codebooks", version=1, spec="VQ<4,2,2>", vec=4, bits=2, stages=1,
                   first_layer=0, num_layers=1, num_kv_heads=1, head_dim=8, tokens=16, model="m",
                   source="s", reordered=0, roles="k,v")
    for r in "kv":
        f.create_dataset(r + "/codebooks", data=np.zeros((1, 1, 1, 2, 4, 4), np.float32))
# A fixed-length string attribute claiming 4 GB.
with h5py.File(out("codebook", "string_attr_size.h5"), "w", libver="earliest") as f:
    f.attrs["format"] = np.bytes_("kvlab-vq-codebooks")
raw = bytearray(open(out("codebook", "string_attr_size.h5"), "rb").read())
# The datatype message of a fixed string (class 3, version 1): its 4-byte size follows the
# 4-byte class/flags word; 18 = len("kvlab-vq-codebooks").
at = re.search(rb"\x13[\x00-\xff]\x00\x00\x12\x00\x00\x00", raw).start()
raw[at + 4:at + 8] = struct.pack("<I", 0xFFFFFFF0)
with open(out("codebook", "string_attr_size.h5"), "wb") as f:
    f.write(raw)

# Spec strings and ranges: a few valid and borderline seeds.
for i, s in enumerate(["bits=2,axis=channel,group=128", "kivi:bits=2,group=32,residual=128", "kitty",
                       "CQ-4c8b", "VQ<4,8,2>", "0-3", "last:256", "stride:9223372036854775807",
                       "bits=9223372036854775807", "fp8:kfmt=e5m2"]):
    with open(out("spec", "seed-%02d.txt" % i), "w") as f:
        f.write(s)

# The zeros of /dev/zero (quantize --input /dev/zero allocated 4 GB).
with open(out("npy", "zeros"), "wb") as f:
    f.write(b"\0" * 4096)
# A tokenizer claiming more entries than its bytes hold, and a checkpoint header of zeros.
with open(out("tokenizer", "short.tok"), "wb") as f:
    f.write(struct.pack("<i", 16) + struct.pack("<fi", 0.0, 1) + b"a")
with open(out("llama2c", "zero_header.bin"), "wb") as f:
    f.write(b"\0" * 28)


# torch.save files: stacked.pt with its pickle patched (and the ZIP rewritten, CRCs fresh).
def patched_pt(name, old, new):
    src = zipfile.ZipFile(os.path.join(HERE, "..", "data", "torch", "stacked.pt"))
    with zipfile.ZipFile(out("dump", name), "w", zipfile.ZIP_STORED) as z:
        for n in src.namelist():
            d = src.read(n)
            if n.endswith("data.pkl"):
                assert d.count(old) >= 1
                d = d.replace(old, new, 1)
            z.writestr(entry(n), d)


# q's strides (80, 20, 4, 1) -> (200, ...): past its 160-element storage (torch.load refuses it).
patched_pt("pt_strides_past_storage.pt", b"K\x50K\x14K\x04K\x01t", b"K\xc8K\x14K\x04K\x01t")
# q's storage claims 240 elements; its record holds 160 (read past the buffer: other numbers each run).
patched_pt("pt_storage_longer_than_record.pt", b"X\x03\x00\x00\x00cpuq\x06K\xa0", b"X\x03\x00\x00\x00cpuq\x06K\xf0")


# HDF5 dumps whose metadata is sound but whose values' storage is corrupt: libhdf5 1.10.8 read
# them in the kvlab process before kvlab decoded them itself (a heap-buffer-overflow READ found by
# fuzz_dump on the GPU host: docs/RELIABILITY.md). Each patches one field of a small valid dump.
def small_dump(name, **ds_args):
    path = out("dump", name)
    with h5py.File(path, "w", libver="earliest") as f:
        dump_attrs(f, 512)  # enough tokens for boost-sweep to read the values
        for r in "qkv":
            x = (np.arange(512 * 8, dtype=np.float32).reshape(1, 512, 8) % 13) / 4
            f.create_dataset("layers/0/" + r, data=x, **ds_args)
        chunk = [f["layers/0/" + r].id.get_chunk_info(0) for r in "qkv"] if "chunks" in ds_args else None
        contiguous = f["layers/0/v"].id.get_offset()
    return path, chunk, contiguous


def first_chunk(c, size=None, mask=0, addr=None):  # a v1 chunk B-tree key: size, mask, offsets 0; its address
    return struct.pack("<II", c.size if size is None else size, mask) + b"\0" * 32 + struct.pack(
        "<Q", c.byte_offset if addr is None else addr)


def patch(path, old, new, count=1):
    raw = bytes(open(path, "rb").read())
    assert raw.count(old) == count, (path, old)
    with open(path, "wb") as f:
        f.write(raw.replace(old, new))


# Deflate alone (libhdf5 read it), the first chunk's filter mask saying "deflate skipped": libhdf5
# took the compressed bytes for the whole chunk and copied past them (q, k and v each).
path, cs, _ = small_dump("hdf5_chunk_mask_skips_deflate.h5", chunks=(1, 16, 8), compression="gzip")
for c in cs:
    patch(path, first_chunk(c), first_chunk(c, mask=1))
# Shuffle + deflate (kvlab's layout), a chunk address and a chunk size past the end of the file.
path, cs, _ = small_dump("hdf5_chunk_addr_past_eof.h5", chunks=(1, 16, 8), shuffle=True, compression="gzip")
patch(path, first_chunk(cs[2]), first_chunk(cs[2], addr=1 << 40))
path, cs, _ = small_dump("hdf5_chunk_size_past_eof.h5", chunks=(1, 16, 8), shuffle=True, compression="gzip")
patch(path, first_chunk(cs[2]), first_chunk(cs[2], size=0x7FFFFFF0))
# Contiguous values starting 16 bytes before the end of the file.
path, _, addr = small_dump("hdf5_contiguous_past_eof.h5")
patch(path, struct.pack("<QQ", addr, 512 * 8 * 4), struct.pack("<QQ", os.path.getsize(path) - 16, 512 * 8 * 4))
# The filter pipeline naming filter 32000 instead of deflate (1): only libhdf5 could read it.
path, _, _ = small_dump("hdf5_filter_unknown.h5", chunks=(1, 16, 8), compression="gzip")
# Filter pipeline message v1: version 1, 1 filter, 6 reserved bytes, then id 1 (deflate).
patch(path, b"\x01\x01\0\0\0\0\0\0\x01\0", b"\x01\x01\0\0\0\0\0\0\x00\x7d", count=3)
# A float32 type whose mantissa claims 30 bits, overlapping the exponent (class 1 float message:
# offset 0, precision 32, exponent at 23 of 8 bits, mantissa at 0 of 23 bits, bias 127).
path, _, _ = small_dump("hdf5_float_fields_overlap.h5", chunks=(1, 16, 8))
ieee = struct.pack("<HHBBBBI", 0, 32, 23, 8, 0, 23, 127)
patch(path, ieee, struct.pack("<HHBBBBI", 0, 32, 23, 8, 0, 30, 127), count=3)


# Seeds of fuzz_hf_checkpoint: a small safetensors file (F32, F16, BF16, I64 tensors) and the
# reference model's config.json.
def safetensors(path, tensors):
    header, data = {}, b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


safetensors(out("hf_checkpoint", "small.safetensors"), {
    "a": ("F32", [2, 3], np.arange(6, dtype="<f4").tobytes()),
    "b": ("F16", [4], np.arange(4, dtype="<f2").tobytes()),
    "c": ("BF16", [2], struct.pack("<HH", 0x3F80, 0xC000)),
    "d": ("I64", [1], struct.pack("<q", 7)),
})
with open(os.path.join(HERE, "..", "..", "data", "kvlab-ref-18m", "config.json"), "rb") as src:
    with open(out("hf_checkpoint", "config.json"), "wb") as f:
        f.write(src.read())
