"""VQ codebooks (``kvlab vq``) on arrays: CQ-<c>c<b>b / VQ<v,b,r> codebooks for one head's
keys or values, trained with kvlab's k-means; frequency reordering for a kernel's cache levels.

    cb = kvlab.vq.train(k_head, "CQ-4c8b")      # k_head: (T, D) float32
    codes = cb.encode(k_head); k_hat = cb.decode(codes)
    r = kvlab.vq.reorder(cb, codes, reg_bytes=256, smem_bytes=1536)
"""
from ._ext import ext
from ._inputs import as_array

Codebooks = ext.Codebooks


def train(x, spec="CQ-4c8b", *, iters=20, init="kmeans++", seed=0, threads=0):
    """Codebooks for x (T, D) float32: [stage][group][entry][vec] in ``.data``; ``encode(x)``
    gives codes (T, stages, groups) uint8 and ``decode(codes)`` x_hat (T, D)."""
    return ext.vq_train(as_array(x, "x"), spec, iters, init, seed, threads)


def reorder(codebooks, codes, *, reg_bytes, smem_bytes):
    """Sort each codebook's entries by use in ``codes`` (descending; decoding is unchanged bit
    for bit). Returns ``codebooks`` (reordered), ``codes`` (remapped), ``usage``,
    ``old_of_new`` and ``levels``: per codebook, how registers (reg_bytes), shared memory
    (smem_bytes) and global memory would serve its lookups."""
    return ext.vq_reorder(codebooks, codes, reg_bytes, smem_bytes)
