// CPU attention reference (Eigen GEMMs, OpenMP over heads and query tiles) and the attention
// error of quantized caches against it.
//
// For query head h at position t: P = softmax(q_t K[0..t]^T / sqrt(D)) (causal), O = P V[0..t];
// GQA maps query head h to KV head h / (Hq / Hkv). Work is tiled (query_tile x key_tile), so
// memory stays O(tile) whatever T is; the results are the same for any thread count and agree
// across tile sizes to fp32 rounding.
#pragma once
#include <cstdint>
#include <vector>

#include "kvlab/method.h"
#include "kvlab/metrics.h"
#include "kvlab/tensor.h"

namespace kvlab {

struct AttentionTiles {
  int64_t query_tile = 64;  // query positions per task; the query heads of a KV head are stacked,
                            // so a GEMM has query_tile x (Hq / Hkv) rows
  int64_t key_tile = 128;   // keys per step of the sweep
};

// CPU seconds (CLOCK_THREAD_CPUTIME_ID) spent in each part of the attention kernel, summed over
// threads.
struct AttentionTimes {
  double gemm_qk = 0;  // logits q K^T and the methods' logit differences q (K - K_hat)^T
  double gemm_pv = 0;  // outputs P V and P_hat V_hat
  double softmax = 0;  // row maxima, rescaling, exponentials
  double metrics = 0;  // score MSE, KL and output sums
  double topk = 0;     // streaming top-8 per query
  void merge(const AttentionTimes& o);
  double total() const { return gemm_qk + gemm_pv + softmax + metrics + topk; }
};

// Reference outputs O for the query positions `positions` (ascending, each in [0, T)).
// q: (Hq, T, D); k, v: (Hkv, T, D), F32 or F16. Returns (Hq, positions.size(), D).
// Throws std::invalid_argument on shapes, head counts, or positions.
Tensor attention(const TensorView& q, const TensorView& k, const TensorView& v,
                 const std::vector<int64_t>& positions, const AttentionTiles& tiles = {});

// Attention error of each cache (k_hat, v_hat of the same shape as k, v) against the reference:
// result[m][h] for cache m and query head h, over the given query positions.
std::vector<std::vector<AttnStats>> attention_errors(const TensorView& q, const TensorView& k,
                                                     const TensorView& v,
                                                     const std::vector<Reconstruction>& caches,
                                                     const std::vector<int64_t>& positions,
                                                     const AttentionTiles& tiles = {});

}  // namespace kvlab
