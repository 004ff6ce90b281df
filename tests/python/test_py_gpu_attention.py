"""kvlab.gpu.decode_attention on torch CUDA tensors: bit for bit the C++ decode_attention on the
same cache, within FORMATS 9.3's bound of an fp64 reference over Method.apply's K_hat / V_hat
(numpy), the cache's byte count, and clear errors. The GPU tests skip without a CUDA device or
on a build without CUDA; the error paths of such machines run everywhere torch is installed."""
import numpy as np
import pytest

import kvlab
import kvlab.gpu
from kvlab._ext import ext

torch = pytest.importorskip("torch")
gpu = pytest.mark.skipif(not (torch.cuda.is_available() and kvlab.has_gpu()),
                         reason="needs a CUDA device and a kvlab build with CUDA")

METHODS = ["fp16", "int8", "kivi-4", "kivi-2", "kivi-2-sink", "kitty", "kitty-pro",
           "kivi:kbits=4,vbits=4,group=64,residual=32"]
LENGTHS = [1, 5, 129, 300, 1000]


def draw(seed, lengths, hkv, d, hq):
    """Keys with a few large channels (as real keys), values and queries roughly unit normal."""
    rng = np.random.default_rng(seed)
    big = np.where(np.arange(d) % 37 == 5, 8.0, 1.0).astype(np.float32)
    ks = [(rng.standard_normal((hkv, n, d)) * big).astype(np.float32) for n in lengths]
    vs = [rng.standard_normal((hkv, n, d)).astype(np.float32) for n in lengths]
    q = rng.standard_normal((len(lengths), hq, d)).astype(np.float32)
    return ks, vs, q


def reference(q, k_hat, v_hat):
    """fp64 softmax(q k_hat^T / sqrt(D)) v_hat of one sequence: q (Hq, D), k_hat, v_hat (Hkv, L, D)."""
    g = q.shape[0] // k_hat.shape[0]
    k = np.repeat(k_hat.astype(np.float64), g, axis=0)
    v = np.repeat(v_hat.astype(np.float64), g, axis=0)
    s = np.einsum("hd,hld->hl", q.astype(np.float64), k) / np.sqrt(q.shape[1])
    p = np.exp(s - s.max(axis=1, keepdims=True))
    return np.einsum("hl,hld->hd", p / p.sum(axis=1, keepdims=True), v)


@gpu
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("hq,d", [(8, 128), (2, 128), (8, 64)])
@pytest.mark.parametrize("kernel,splits", [("auto", 0), ("split", 7)])
def test_equals_cpp_and_within_bound_of_reference(method, hq, d, kernel, splits):
    ks, vs, q = draw(3, LENGTHS, 2, d, hq)
    cache = kvlab.gpu.DecodeCache(method, ks, vs)
    assert cache.lengths == LENGTHS and cache.batch == 5 and cache.kv_heads == 2 and cache.head_dim == d
    out, run = kvlab.gpu.decode_attention(torch.from_numpy(q).cuda(), cache, kernel, splits, return_run=True)
    assert out.dtype == torch.float32 and out.device == torch.device("cuda", cache.device)
    host, host_run = cache.decode_attention_host(q, kernel=kernel, splits=splits)
    assert (run.kernel, run.splits) == (host_run.kernel, host_run.splits)
    assert out.cpu().numpy().tobytes() == host.tobytes(), f"{method}: differs from the C++ decode_attention"
    m = kvlab.Method(method)
    hats = [m.apply(k, v) for k, v in zip(ks, vs)]
    bound = run.error_bound(q, [h[0] for h in hats], [h[1] for h in hats])
    for b, (k_hat, v_hat) in enumerate(hats):
        err = np.abs(host[b] - reference(q[b], k_hat, v_hat)).max(axis=1)
        assert (err <= bound[b]).all(), f"{method} seq {b}: max err/bound {(err / bound[b]).max():.3g}"
        assert np.isfinite(bound[b]).all() and (bound[b] > 0).all()


@gpu
@pytest.mark.parametrize("method", ["fp16", "int8", "kivi-2-sink", "kitty"])
def test_nbytes_counts_the_packed_parts_and_fp16_rows(method):
    ks, vs, _ = draw(4, [7, 300, 1000], 2, 128, 8)
    cache = kvlab.gpu.DecodeCache(method, ks, vs)
    m, want = kvlab.Method(method), 0
    for k, v in zip(ks, vs):
        s = m.schedule(k.shape[1])
        for x, spec, (begin, end) in ((k, m.key_quantizer, s["key"]), (v, m.value_quantizer, s["value"])):
            n = end - begin if spec else 0
            if n > 0:
                p = kvlab.quantize(np.ascontiguousarray(x[:, begin:end]), spec)
                want += sum(a.nbytes for a in (p.codes, p.scale, p.zero, p.high, p.boost_index) if a is not None)
            want += x.shape[0] * (x.shape[1] - n) * x.shape[2] * 2
    assert cache.nbytes == want


@gpu
@pytest.mark.parametrize("spec,stages", [("CQ-4c8b", 1), ("VQ<4,8,2>", 2)])
def test_codebook_caches_from_a_codebook_file(tmp_path, spec, stages):
    # the vq family (a codebook file of random entries, FORMATS 6.3) on the codebook kernel: the
    # C++ entry's bytes, within the bound of the reference over Method.apply's K_hat / V_hat
    h5py = pytest.importorskip("h5py")
    hkv, d, vec, bits = 2, 128, 4, 8
    path = tmp_path / "books.h5"
    rng = np.random.default_rng(8)
    with h5py.File(path, "w") as f:
        f.attrs.update(format="kvlab-vq-codebooks", version=1, spec=spec, vec=vec, bits=bits, stages=stages,
                       first_layer=0, num_layers=1, num_kv_heads=hkv, head_dim=d, tokens=1000, model="random",
                       source="test_py_gpu_attention.py", reordered=0, roles="k,v")
        for r in "kv":
            shape = (1, hkv, stages, d // vec, 2 ** bits, vec)
            f.create_dataset(r + "/codebooks", data=rng.standard_normal(shape).astype(np.float32))
    method = f"vq:codebooks={path}"
    ks, vs, q = draw(9, [1, 300, 1000], hkv, d, 8)
    cache = kvlab.gpu.DecodeCache(method, ks, vs)
    out, run = kvlab.gpu.decode_attention(torch.from_numpy(q).cuda(), cache, return_run=True)
    assert run.kernel == "codebook"
    host = cache.decode_attention_host(q)[0]
    assert out.cpu().numpy().tobytes() == host.tobytes()
    m = kvlab.Method(method)
    hats = []
    for k, v in zip(ks, vs):  # the vq family's apply takes one KV head
        per = [m.apply(k[h:h + 1], v[h:h + 1], layer=0, kv_head=h) for h in range(hkv)]
        hats.append(tuple(np.concatenate([p[i] for p in per]) for i in (0, 1)))
    bound = run.error_bound(q, [h[0] for h in hats], [h[1] for h in hats])
    for b, (k_hat, v_hat) in enumerate(hats):
        err = np.abs(host[b] - reference(q[b], k_hat, v_hat)).max(axis=1)
        assert (err <= bound[b]).all(), f"{spec} seq {b}: max err/bound {(err / bound[b]).max():.3g}"


@gpu
def test_cuda_and_4d_inputs_and_side_streams_give_the_same_bytes():
    ks, vs, q = draw(5, [300, 300], 2, 128, 8)
    ks = [k.astype(np.float16).astype(np.float32) for k in ks]  # the same cache from float16 tensors
    cache = kvlab.gpu.DecodeCache(kvlab.Method("kivi-2"), ks, vs)
    want = kvlab.gpu.decode_attention(torch.from_numpy(q).cuda(), cache).cpu().numpy()
    with pytest.warns(kvlab.CopyWarning, match="copied to the host"):
        other = kvlab.gpu.DecodeCache("kivi-2", torch.from_numpy(np.stack(ks)).cuda().half(), np.stack(vs))
    assert other.nbytes == cache.nbytes
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):  # q made and read on a side stream: ordered by the stream
        qd = torch.from_numpy(q).cuda() * 1.0
        got = kvlab.gpu.decode_attention(qd, cache)
    assert got.cpu().numpy().tobytes() == want.tobytes()
    again = kvlab.gpu.decode_attention(torch.from_numpy(q).cuda(), other).cpu().numpy()
    assert again.tobytes() == want.tobytes()
    with pytest.warns(kvlab.CopyWarning, match="float16 widened"):
        half = kvlab.gpu.decode_attention(torch.from_numpy(q).cuda().half(), cache)
    widened = cache.decode_attention_host(q.astype(np.float16).astype(np.float32))[0]
    assert half.cpu().numpy().tobytes() == widened.tobytes()


@gpu
def test_bad_queries_and_caches_get_clear_errors():
    ks, vs, q = draw(6, [40, 200], 2, 128, 8)
    cache = kvlab.gpu.DecodeCache("kitty", ks, vs)
    qd = torch.from_numpy(q).cuda()
    cases = [
        (torch.from_numpy(q), "tensor on cpu"),
        (q, "torch CUDA tensor"),
        (qd.double(), "dtype torch.float64"),
        (qd[:1], r"shape \(1, 8, 128\)"),
        (qd[..., :64].contiguous(), "want"),
        (qd[0], "shape"),
        (qd[:, :3].contiguous(), "3 query heads for 2 KV heads"),
        (qd[:, :4].contiguous(), "no decode kernel for this head_dim and query heads per KV head"),
        (torch.zeros((2, 128, 8), device="cuda").transpose(1, 2), "not contiguous"),
    ]
    for bad, match in cases:
        with pytest.raises(ValueError, match=match):
            kvlab.gpu.decode_attention(bad, cache)
    nan = qd.clone()
    nan[1, 3, 7] = float("nan")
    with pytest.raises(ValueError, match="non-finite value .* at flat index 1415"):
        kvlab.gpu.decode_attention(nan, cache)
    # kitty streams now; head_dim 64 is the split kernel's alone
    ks64, vs64, q64 = draw(7, [40], 2, 64, 8)
    with pytest.raises(ValueError, match="streaming kernel: head_dim 128"):
        kvlab.gpu.decode_attention(torch.from_numpy(q64).cuda(), kvlab.gpu.DecodeCache("kitty", ks64, vs64),
                                   kernel="stream")
    with pytest.raises(ValueError, match="decode kernel 'fast'"):
        kvlab.gpu.decode_attention(qd, cache, kernel="fast")
    with pytest.raises(ValueError, match="splits=-1"):
        kvlab.gpu.decode_attention(qd, cache, splits=-1)
    with pytest.raises(TypeError, match="DecodeCache"):
        kvlab.gpu.decode_attention(qd, cache._c)
    refused = [
        ("nvfp4", ks, vs, "no decode kernel for family fp4"),
        ("kivi:kbits=2,vbits=2,profile=kivi", ks, vs, "kvlab profile only"),
        ("kivi:kbits=4,vbits=2", ks, vs, "no decode kernel for keys"),
        ("kivi-2", [k[..., :96].copy() for k in ks], [v[..., :96].copy() for v in vs], "head_dim 96"),
        ("kivi-2", ks, vs[:1], "2 key and 1 value sequences"),
        ("kivi-2", ks, [vs[0], vs[0]], r"sequence 1: keys \(2, 200, 128\) and values \(2, 40, 128\)"),
        ("kivi-2", ks[0], vs[0], "one array of shape"),
        ("kivi-2", [], [], "non-empty list"),
        ("kivi-2", [ks[0].astype(np.float64)], [vs[0]], r"keys\[0\]: dtype float64"),
    ]
    for method, k, v, match in refused:
        with pytest.raises(ValueError, match=match):
            kvlab.gpu.DecodeCache(method, k, v)
    inf = [ks[0].copy(), ks[1]]
    inf[0][1, 2, 3] = np.inf
    with pytest.raises(ValueError, match="non-finite"):
        kvlab.gpu.DecodeCache("kivi-2", inf, vs)
    with pytest.raises(ValueError, match=r"q: .* \(want float32"):
        cache.decode_attention_host(q[:1])


def test_without_a_device_or_cuda_the_cache_says_why(monkeypatch):
    with pytest.raises(TypeError, match="pass a kvlab.gpu.DecodeCache"):
        kvlab.gpu.decode_attention(torch.zeros((1, 4, 128)), object())
    k = [np.zeros((2, 16, 128), np.float32)]
    if kvlab.has_gpu() and not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="no CUDA device"):
            kvlab.gpu.DecodeCache("kivi-2", k, k)
    monkeypatch.setattr(ext, "has_gpu", False)
    with pytest.raises(ValueError, match="this kvlab build has no CUDA"):
        kvlab.gpu.DecodeCache("kivi-2", k, k)
