// Key-channel sensitivity: which channels hurt attention most when quantized (`kvlab sensitivity`).
//
// For every layer, KV head g and key channel c, only channel c is quantized (asym, `bits` bits,
// per-channel groups of G tokens over the method's key range [S, S + floor((T - S)/G) G), the
// sink and the incomplete last group stay exact), and the attention scores of every query head
// sharing g are recomputed and compared with the unperturbed ones:
//   attn_score_mse = sum over queries t, keys j <= t of (P - P_c)^2 / sum over queries of (t + 1).
// Quantizing channel c moves every logit by q[c] (k_hat[c] - k[c]) / sqrt(D), a rank-1 update, so
// the fast path costs O(queries x keys) per channel (see sensitivity_kernel.h); the naive path
// recomputes every logit and serves as the reference.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "kvlab/evaluate.h"
#include "kvlab/selection.h"
#include "kvlab/spec.h"

namespace kvlab {

// One KV head's sensitivity work for a device (SensitivityOptions::backend): the fast path's
// sums (calibration/src/sensitivity_kernel.h), which the CPU then finishes as its own, fallbacks
// included. Rows are query heads then queries: row r = h * count + i.
struct SensitivityUnit {
  const float* q = nullptr;  // (heads, T, D) the KV head's query heads, unscaled
  int64_t heads = 0, T = 0, D = 0;
  const double* k = nullptr;             // (T, D) the KV head's keys
  const double* delta = nullptr;         // (D, n) k_hat - k over keys [kb, kb + n), channel-major
  const double* delta_absmax = nullptr;  // (D) max |delta| per channel
  int64_t kb = 0, n = 0;
  const int64_t* positions = nullptr;  // selected query positions, ascending
  int64_t count = 0;
};

// Fills abc (heads * count, D, 3) with A, B, C per row and channel, the expm1 polynomial chosen
// per (query, channel) as the CPU chooses it, and s0 (heads * count) with sum_j P_j^2 over the
// row's keys; accumulated in fp64. Results within docs/EVAL_JSON.md ("Devices") of the CPU's.
using SensitivityBackend =
    std::function<void(const SensitivityUnit&, std::vector<double>& abc, std::vector<double>& s0)>;

struct SensitivityOptions {
  int bits = 2;                                       // code bits of the quantized channel
  int group = 128;                                    // G, tokens per channel group
  int sink = 32;                                      // S, leading tokens left exact
  ParamType params = ParamType::F16;                  // scale/zero storage (as the kitty preset)
  Profile profile = Profile::Kvlab;                   // arithmetic recipe
  QuerySelection queries;                             // query positions (default all)
  LayerRange layers;                                  // layers (default all)
  int threads = 0;                                    // OpenMP threads; 0: the OpenMP default
  bool naive = false;                                 // recompute every logit (the reference; D times slower)
  SensitivityBackend backend;                         // the fast path's sums on a device; empty: the CPU
  std::shared_ptr<const Codec> codec;                 // quantizes the keys (kvlab/codec.h); null: core
  std::function<void(const EvalProgress&)> progress;  // after each layer
};

// Statistics of key channel c of one (layer, KV head) over the quantized key range.
struct ChannelStats {
  double mean_abs = 0;  // mean |k| (Kitty's boost score)
  double max_abs = 0;   // max |k|
  double variance = 0;  // population variance
};

struct SensitivityRow {
  int64_t layer = 0, kv_head = 0, q_head = 0, channel = 0;
  double attn_score_mse = 0;
  ChannelStats stats;
};

// How well magnitude ranks sensitivity for one (layer, KV head); sensitivity of a channel is the
// mean of attn_score_mse over the KV head's query heads.
struct RankingRow {
  int64_t layer = 0, kv_head = 0;
  double spearman = 0;         // Spearman rho of mean_abs against sensitivity (NaN: a constant side)
  std::vector<int64_t> ks;     // D/16, D/8, D/4
  std::vector<double> recall;  // |top-k sensitive & top-k magnitude| / k (NaN where k = 0)
};

struct SensitivityResult {
  EvalShape shape;
  LayerRange layers;  // resolved
  int64_t num_queries = 0;
  int64_t key_begin = 0, key_end = 0;  // the quantized token range
  std::vector<SensitivityRow> rows;    // by layer, kv_head, q_head, channel
  std::vector<RankingRow> rankings;    // by layer, kv_head
  double seconds = 0, load_seconds = 0;
};

// Throws std::invalid_argument naming the parameter: bits outside 1..8, group < 1, sink < 0,
// T < sink + group (no channel would be quantized), layers or queries out of range.
SensitivityResult channel_sensitivity(const EvalShape& shape, const LayerLoader& load,
                                      const SensitivityOptions& o);

// One layer: q (Hq, T, D), k (Hkv, T, D) fp32. Appends to rows (order as in the result).
void layer_sensitivity(int64_t layer, const Tensor& q, const Tensor& k, const std::vector<int64_t>& positions,
                       const SensitivityOptions& o, std::vector<SensitivityRow>& rows);

// The pieces of channel_sensitivity for a driver that places (layer, KV head) units itself (the
// MPI driver; docs/SCALING.md). sensitivity_plan: options checked, layers, queries and the key
// range resolved, no rows. head_sensitivity: one unit through layer_sensitivity, q (group, T, D)
// of KV head g's query heads, k (1, T, D); rows appended numbered as in the whole layer. A KV
// head's rows do not depend on the other heads, so the rows equal channel_sensitivity's bit for bit.
SensitivityResult sensitivity_plan(const EvalShape& shape, const SensitivityOptions& o);
void head_sensitivity(int64_t layer, int64_t g, const Tensor& q, const Tensor& k,
                      const std::vector<int64_t>& positions, const SensitivityOptions& o,
                      std::vector<SensitivityRow>& rows);

// Per-channel statistics of tokens [begin, end) of a (T, D) head.
std::vector<ChannelStats> channel_stats(const float* k, int64_t D, int64_t begin, int64_t end);

// Sensitivity per (kv head, channel) averaged over query heads, from rows of one layer.
std::vector<RankingRow> rank_layer(const std::vector<SensitivityRow>& rows, int64_t layer,
                                   int64_t num_kv_heads, int64_t head_dim);

}  // namespace kvlab
