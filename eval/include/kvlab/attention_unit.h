// The unit of attention work that eval (and a distribution layer above it) hands to a device:
// the query heads of one KV head against the reference K, V and every method's cache. The CPU's
// tiled kernel computes it by default; a backend (kvlab_eval_gpu's CUDA one) may instead.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "kvlab/attention.h"
#include "kvlab/metrics.h"

namespace kvlab {

// One method's cache of one KV head, row-major (T, D).
struct MethodKV {
  const float* dk = nullptr;     // K - K_hat (the reference keys minus the method's)
  const float* v_hat = nullptr;  // V_hat
};

struct AttentionUnit {
  const float* q = nullptr;  // (heads, N, D) selected queries, scaled by 1/sqrt(D)
  int64_t heads = 0, N = 0, D = 0;
  const int64_t* pos = nullptr;  // N positions, ascending
  const float* k = nullptr;      // reference K, V of the KV head, (T, D); rows 0..pos[N-1] are read
  const float* v = nullptr;
  std::vector<MethodKV> methods;
  AttentionTiles tiles;  // the CPU kernel's tile sizes (a device picks its own)
  // false: the top-8 overlap may be skipped (AttnStats::topk_sum left 0), for callers that read
  // no top-8 metric (kvlab plan); the other sums do not change.
  bool topk = true;
};

struct AttentionUnitResult {
  std::vector<std::vector<AttnStats>> stats;  // [method][head]
  std::vector<double> ref_sq;                 // per head: sum over queries of ||O||^2
};

// Computes one unit. times: the CPU kernel's seconds by part (a device may leave it alone).
// Must give the CPU kernel's sums within a stated bound (docs/EVAL_JSON.md, "Devices").
using AttentionBackend = std::function<void(const AttentionUnit&, AttentionUnitResult&, AttentionTimes*)>;

// The CPU kernel as a backend (OpenMP over query tiles, fixed-order reduction).
void cpu_attention_unit(const AttentionUnit& unit, AttentionUnitResult& result, AttentionTimes* times);

// attention_errors (attention.h) with each KV head's unit computed by `backend` (empty: the CPU).
std::vector<std::vector<AttnStats>> attention_errors(
    const TensorView& q, const TensorView& k, const TensorView& v, const std::vector<Reconstruction>& caches,
    const std::vector<int64_t>& positions, const AttentionBackend& backend, const AttentionTiles& tiles = {});

}  // namespace kvlab
