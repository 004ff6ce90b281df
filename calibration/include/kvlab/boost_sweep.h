// Kitty's boost budget against the channel selector (`kvlab boost-sweep`): the tensor-level
// analogue of the Kitty paper's Figure 4.
//
// For every rate r and selector, Kitty (core's kitty method, keys in pages with
// k = boost_count(D, r) channels at kbits + 2) is applied to each layer's K and V, and eval's
// attention reference scores it on the evaluation queries. The oracle ranks channels by their
// sensitivity (sensitivity.h) measured on a calibration prefix of the sequence, tokens
// [0, calib_tokens), and must then be judged on queries after it: every evaluated query lies at
// or after calib_tokens, for every selector alike. prefix-magnitude (not in the default list)
// ranks by mean |k| on the same prefix, also once per head.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kvlab/boost_selection.h"
#include "kvlab/evaluate.h"
#include "kvlab/method.h"
#include "kvlab/metrics.h"

namespace kvlab {

struct SweepOptions {
  std::string method = "kitty";  // base Kitty spec; its boost is replaced by each rate
  std::vector<double> rates{0, 0.0625, 0.125, 0.25, 0.5, 1};  // boost rates, each in [0, 1]
  std::vector<Selector> selectors{Selector::Magnitude, Selector::Random, Selector::Variance,
                                  Selector::Oracle};
  int seeds = 5;                // random: seeds 0 .. seeds-1
  int64_t calib_tokens = 0;     // oracle's calibration prefix; 0: T / 2
  int64_t calib_queries = 256;  // the oracle's sensitivity uses the prefix's last N queries
  QuerySelection queries{QuerySelection::Mode::Last,
                         0};  // evaluation queries; last:0 = last min(256, T - calib)
  LayerRange layers;
  int threads = 0;  // OpenMP threads; 0: the OpenMP default
  std::function<void(const EvalProgress&)> progress;
  AttentionBackend backend;            // computes the attention units (evaluate.h); empty: the CPU kernel
  std::shared_ptr<const Codec> codec;  // applies the magnitude rows' methods (kvlab/codec.h); null: core
};

// One (selector, rate, seed) over all evaluated layers and query heads.
struct SweepRow {
  Selector selector = Selector::Magnitude;
  double rate = 0;
  int seed = -1;        // random: the seed; -1 for the deterministic selectors
  int64_t boost_k = 0;  // boosted channels per page
  AttnStats attn;
  Bits bits;  // bits per element (core's accounting; the same for every selector)
};

// Mean and spread of a selector at a rate over its seeds (one row for deterministic selectors).
struct SweepSummary {
  Selector selector = Selector::Magnitude;
  double rate = 0;
  int64_t boost_k = 0;
  int runs = 0;
  double score_mse_mean = 0, score_mse_std = 0, score_mse_min = 0, score_mse_max = 0;
  double out_err_mean = 0, out_err_std = 0;
  double bits = 0;
};

struct SweepResult {
  EvalShape shape;
  std::string method;  // canonical base spec
  LayerRange layers;
  int64_t calib_tokens = 0, num_queries = 0, first_query = 0;
  std::vector<SweepRow> rows;  // selector-major, then rate, then seed
  std::vector<SweepSummary> summary;
  double seconds = 0;
};

// Throws std::invalid_argument naming the option: rates outside [0, 1] or a rate list that is
// empty, a method that is not Kitty, seeds < 1, a calibration prefix that leaves no quantized
// key group (oracle), evaluation queries before calib_tokens, or T too short for any key page.
SweepResult boost_sweep(const EvalShape& shape, const LayerLoader& load, const SweepOptions& o);

// The pieces of boost_sweep() for a driver that places (layer, KV head) units itself (the MPI
// driver; docs/SCALING.md). boost_sweep is sweep_plan, sweep_heads on each whole layer, the stats
// merged into the rows (layer by layer, query head by query head), and summarize.
struct SweepPlan {
  SweepResult result;              // rows with empty attn; no summary
  std::vector<MethodPtr> at_rate;  // per row: the base method at the row's rate
  std::vector<int64_t> positions;  // evaluation queries
  MethodPtr base;
  bool oracle = false, prefix_magnitude = false;  // whether those selectors run
};
// Options checked (throws as boost_sweep does).
SweepPlan sweep_plan(const EvalShape& shape, const SweepOptions& o);
// x holds KV heads first_head.. of one layer (k, v (h, T, D)) and their query heads; returns per
// row the stats of each query head of x. A head's stats do not depend on the other heads in x
// (random channels are drawn per (seed, global head, page)), so any split gives the same bits.
std::vector<std::vector<AttnStats>> sweep_heads(const SweepPlan& plan, const LayerQKV& x, int64_t first_head,
                                                const SweepOptions& o);

// "0,0.125,1" -> rates; throws naming --rates for bad numbers or values outside [0, 1].
std::vector<double> parse_rates(const std::string& list);

std::vector<SweepSummary> summarize(const std::vector<SweepRow>& rows);

}  // namespace kvlab
