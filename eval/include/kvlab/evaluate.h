// Offline error evaluation of KV-cache methods on a dump: `kvlab eval`.
//
// For each layer (one in memory at a time) and KV head, every method is applied to K and V as
// its schedule leaves the cache after all T dumped tokens (the method's apply: sink tokens and
// residual windows in fp16, keys in groups or pages, boosted channels), dequantized, and
// attention is recomputed from the dumped queries and compared with the full-precision
// reference. The cache state after T tokens serves every query: a query at an earlier position
// t sees that final cache restricted causally to keys 0..t (a key group that was still the fp16
// residual at time t is quantized here). Reconstruction errors are taken over the quantized
// positions only; attention metrics over every valid causal entry.
//
// eval does not read files: the caller passes a loader (the CLI wraps kvlab::DumpReader).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kvlab/attention.h"
#include "kvlab/attention_unit.h"
#include "kvlab/codec.h"
#include "kvlab/method.h"
#include "kvlab/metrics.h"
#include "kvlab/selection.h"
#include "kvlab/tensor.h"

namespace kvlab {

struct EvalShape {
  int64_t num_layers = 0, num_q_heads = 0, num_kv_heads = 0, head_dim = 0, tokens = 0;
  // The dump's RoPE and whether it holds k_pre_rope: methods that quantize keys before RoPE
  // (Method::needs_k_pre_rope) need both.
  RopeStyle rope_style = RopeStyle::None;
  float rope_theta = 10000.0f;
  bool has_k_pre_rope = false;
};

// One layer: q (num_q_heads, T, D), k and v (num_kv_heads, T, D), fp32; k_pre_rope (shaped as k)
// when a method needs it (eval_needs_k_pre_rope), else empty.
struct LayerQKV {
  Tensor q, k, v;
  Tensor k_pre_rope{};
};

// True when one of these methods (names as EvalOptions::methods) quantizes keys before RoPE,
// so the loader must fill LayerQKV::k_pre_rope.
bool eval_needs_k_pre_rope(const std::vector<std::string>& methods);
using LayerLoader = std::function<LayerQKV(int64_t layer)>;

struct EvalProgress {
  int64_t layers_done = 0, layers_total = 0;
  double elapsed_s = 0;
};

struct EvalOptions {
  std::vector<std::string> methods;  // preset names or spec strings; empty: default_eval_methods()
  QuerySelection queries;            // which query positions
  LayerRange layers;                 // which layers (default all)
  AttentionTiles tiles;              // tile sizes (results agree across sizes to fp32 rounding)
  int threads = 0;                   // OpenMP threads; 0: the OpenMP default
  std::function<void(const EvalProgress&)> progress;  // after each layer
  AttentionBackend backend;            // computes each KV head's attention unit; empty: the CPU kernel
  bool prefetch = false;               // load layer l + 1 on a second thread while layer l is computed
                                       // (two layers in memory; for backends that leave the CPU cores idle)
  std::shared_ptr<const Codec> codec;  // where methods quantize (kvlab/codec.h); null: core on the CPU
  bool topk = true;  // false: the top-8 overlap may be skipped (topk_overlap 0); kvlab plan reads none
};

// One layer of one method. key/value: per KV head; attn: per query head (head h uses KV head
// h / (num_q_heads / num_kv_heads)).
struct LayerEval {
  int64_t layer = 0;
  std::vector<ReconStats> key, value;
  std::vector<AttnStats> attn;
  ReconStats key_total() const;
  ReconStats value_total() const;
  AttnStats attn_total() const;
};

struct MethodEval {
  std::string name;         // as given (preset name or spec string)
  std::string spec;         // canonical spec string
  std::string calibration;  // what the method learned from (Method::calibration), or empty
  MethodPtr method;         // resolved once, from the method registry (method.h)
  Bits bits;                // bits per element of a T-token cache, from the method's accounting
  Schedule schedule;        // quantized token ranges after T tokens
  std::vector<LayerEval> layers;
  ReconStats key, value;  // over all evaluated layers and heads
  AttnStats attn;
};

// Wall and process CPU seconds per phase, and the attention kernel's CPU seconds by part.
struct EvalTimes {
  double load = 0;       // the loader (reading the dump)
  double quantize = 0;   // the methods' apply, reconstruction errors, K - K_hat
  double attention = 0;  // the attention kernel with its metrics
  double total = 0;
  double load_cpu = 0, quantize_cpu = 0, attention_cpu = 0, total_cpu = 0;  // CPU, all threads
  AttentionTimes cpu;  // inside `attention`, by part, summed over threads
};

struct EvalResult {
  EvalShape shape;
  QuerySelection queries;
  int64_t num_queries = 0;  // selected positions per head
  LayerRange layers;        // resolved
  AttentionTiles tiles;
  int threads = 0;                  // OpenMP threads used (per rank)
  int ranks = 1;                    // processes the units were spread over (docs/SCALING.md)
  std::vector<MethodEval> methods;  // in the order given
  EvalTimes times;
};

// Throws std::invalid_argument for unknown methods or parameters (listing the valid ones),
// layers out of range, N larger than T, or tensors of the wrong shape from the loader; the
// loader's own errors (a missing role, an unreadable file) pass through.
EvalResult evaluate(const EvalShape& shape, const LayerLoader& load, const EvalOptions& options);

// The pieces of evaluate() for a driver that places the work units (layer, KV head, method)
// itself (the MPI driver, experiments/dist_eval.cpp; docs/SCALING.md). evaluate() is eval_plan,
// then each layer's KV heads in order through the function eval_head calls, then eval_finish; the
// per-(layer, head, method) sums do not depend on which units were computed together, and
// eval_finish merges them in one fixed order, so any placement gives the same bits.

// One KV head of one layer: q (group, T, D) of its query heads, k and v (1, T, D), fp32;
// k_pre_rope (1, T, D) when a method needs it (eval_needs_k_pre_rope), else empty.
struct HeadQKV {
  Tensor q, k, v;
  Tensor k_pre_rope{};
};

// Methods resolved and checked, layers and queries resolved, every (method, layer, head) slot
// zero. Throws as evaluate does.
EvalResult eval_plan(const EvalShape& shape, const EvalOptions& options);

// KV head g of `layer` for the methods `which` (indices into r.methods): fills their key[g],
// value[g] and the attn of g's query heads, and adds to r.times' quantize and attention phases.
// Throws std::invalid_argument for a unit outside the plan or tensors of the wrong shape.
void eval_head(EvalResult& r, int64_t layer, int64_t g, const std::vector<int>& which, HeadQKV x,
               const EvalOptions& options);

// Totals over layers and heads, in layer order then head order.
void eval_finish(EvalResult& r);

}  // namespace kvlab
