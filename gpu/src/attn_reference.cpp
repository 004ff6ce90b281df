// fp64 decode-attention reference over K_hat / V_hat and the error bound of the kernels' fp32
// arithmetic (docs/FORMATS.md section 9.3).
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "attn_types.h"
#include "kvlab_gpu/attention.h"

namespace kvlab::gpu {

std::vector<double> decode_reference(const float* q, const float* k_hat, const float* v_hat, int Hq, int Hkv,
                                     int L, int D) {
  std::vector<double> out((size_t)Hq * D, 0.0), logit(L);
  const int group = Hq / Hkv;
  for (int hq = 0; hq < Hq; ++hq) {
    const float* k = k_hat + (size_t)(hq / group) * L * D;
    const float* v = v_hat + (size_t)(hq / group) * L * D;
    double mx = -HUGE_VAL;
    for (int t = 0; t < L; ++t) {
      double s = 0;
      for (int c = 0; c < D; ++c) s += (double)q[hq * D + c] * k[(size_t)t * D + c];
      logit[t] = s / std::sqrt((double)D);
      mx = std::max(mx, logit[t]);
    }
    double den = 0;
    for (int t = 0; t < L; ++t) den += logit[t] = std::exp(logit[t] - mx);
    for (int t = 0; t < L; ++t)
      for (int c = 0; c < D; ++c) out[(size_t)hq * D + c] += logit[t] / den * v[(size_t)t * D + c];
  }
  return out;
}

// With u = 2^-24 and gamma(n) = n u / (1 - n u):
//  - a logit (log2 units) is an fp32 dot product of D terms plus the scaling of q:
//    delta <= gamma(D + 2) * max_t sum_c |q_c k_tc| log2(e) / sqrt(D);
//  - each probability 2^(s - m) then carries a relative error eta <= ln2 (2 delta) + 4u (exp2f's
//    2 ulp and the subtraction), which moves a normalized output by at most 2 eta / (1 - eta) max|v|;
//  - the sums P V and sum P run in fp32 chains no longer than n = tokens per token lane per split
//    (16 or 32 lanes) + lanes + splits + tiles + a tile's share of the softmax sum: 2 gamma(n) max|v|;
//  - the per-tile rescales and the final division: (3 tiles + 4) u max|v|.
//  Streaming kernel: a lane's P V chain holds its warp's share of the split's staged tiles plus
//  (at most) every token of the rest, then the merges of warps and splits; its rescales are one
//  per tile or rest chunk plus the merges.
//  Codebook kernel: the same as the streaming kernel with every token in tiles of 32 (the last
//  one partial), shape.warps warps and no rest; it forms K_hat and V_hat before any product (or,
//  CQ-4c8b's table, sums the same D products q_c K_hat_c in another order).
//  Tensor-core tiles (shape.mma) sum codes times (q * scale) and (p * scale) and the zeros apart:
//  each term's magnitude is then |K_hat| + |scale code| + |zero| (k_extra adds the last two; same
//  for values), and the extra roundings (the products q * scale and p * scale, their hi + lo
//  split to 2^-22, the MMA's fp32 accumulation taken as 8 u per 16-term step, hi + lo and the
//  final scaling) stay under gamma(D + 2) for the logits and add 8 u max|v| for P V.
double decode_error_bound(const float* q_head, const float* k_hat, const float* v_hat, int L, int D,
                          const DecodeShape& shape, const float* k_extra, const float* v_extra) {
  if (shape.mma && (!k_extra || !v_extra))
    throw std::invalid_argument("decode_error_bound: the tensor-core kernel's bound needs packed_magnitudes");
  const int splits = shape.splits, tile_tokens = shape.tile_tokens;
  const double u = std::ldexp(1.0, -24);
  auto gamma = [u](double n) { return n * u / (1 - n * u); };
  double amax = 0, vmax = 0;
  for (int t = 0; t < L; ++t) {
    double a = 0;
    for (int c = 0; c < D; ++c) {
      const size_t i = (size_t)t * D + c;
      a += std::fabs((double)q_head[c]) * (std::fabs((double)k_hat[i]) + (k_extra ? k_extra[i] : 0.0));
      vmax = std::max(vmax, std::fabs((double)v_hat[i]) + (v_extra ? v_extra[i] : 0.0));
    }
    amax = std::max(amax, a);
  }
  const double delta = gamma(D + 2) * amax * 1.4426950408889634 / std::sqrt((double)D);
  const double eta = std::log(2.0) * 2 * delta + 4 * u;
  if (shape.kernel == DecodeKernel::Codebook) {
    const int W = shape.warps, ntiles = (L + tile_tokens - 1) / tile_tokens;
    const int per = (ntiles + splits - 1) / splits, per_warp = (per + W - 1) / W;
    const int rescales = per_warp + W + splits;
    const double n = (double)per_warp * tile_tokens + tile_tokens / 32 + 5 + W + splits + rescales + 8;
    return vmax * (2 * eta / (1 - eta) + 2 * gamma(n) + (3.0 * rescales + 4) * u);
  }
  if (shape.kernel == DecodeKernel::Stream) {
    const int W = attn::kStreamWarps, ntiles = (shape.main_tokens + tile_tokens - 1) / tile_tokens;
    const int R = shape.run_tiles, per = (ntiles + splits - 1) / splits;
    const int per_warp = R * (((per + R - 1) / R + W - 1) / W);  // tiles: runs of R, warps in turn
    const int rest = L - shape.main_tokens;
    const int rescales = per_warp + (rest + attn::kRestTokens - 1) / attn::kRestTokens + W + splits;
    const double n = (double)per_warp * tile_tokens + rest + tile_tokens / 32 + 5 + W + splits + rescales + 8;
    // p_fixed: p <= 1 split at 2^14 carries p to 2^-22 relative plus 2^-39 absolute (fp16
    // subnormal hi, lo), and the denominator is >= 1: L 2^-39 max|v| at most
    const double p_abs = shape.p_fixed ? L * std::ldexp(1.0, -15) : 0.0;
    return vmax *
           (2 * eta / (1 - eta) + 2 * gamma(n) + (3.0 * rescales + 4 + (shape.mma ? 8 : 0) + p_abs) * u);
  }
  const int tiles = 1 + (L + tile_tokens - 1) / tile_tokens;
  const int per_split = std::min(L, (tiles + splits - 1) / splits * tile_tokens);
  const int lanes = attn::kAttnThreads / (D / 16);
  const double n = (double)per_split / (lanes / 2) + lanes + splits + tiles + tile_tokens / 32 + 8;
  return vmax * (2 * eta / (1 - eta) + 2 * gamma(n) + (3.0 * tiles + 4) * u);
}

}  // namespace kvlab::gpu
