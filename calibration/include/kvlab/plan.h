// Budgeted mixed precision (`kvlab plan`): one method per layer (or per layer and KV head,
// `--per-head`), chosen from a menu of candidates by their measured error on a calibration
// dump so that the summed error is least while the mean bits per element stay within a
// budget. The plan is a JSON file (docs/FORMATS.md section 11) and a method,
// `plan:file=PLAN.json`, that eval, ppl and Python accept like any other (each layer, or each
// KV head of a layer, rebuilt by its own method).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kvlab {

// One KV head's choice in a per-head plan.
struct PlanHead {
  int64_t kv_head = 0;
  std::string method;  // canonical spec
  double bits = 0;     // bits per element at the calibration dump's T
  double error = 0;    // the metric measured for this KV head (its query heads) on the calibration dump
};

struct PlanLayer {
  int64_t layer = 0;
  std::string method;  // canonical spec; in a per-head plan the heads' common method, or empty
  double bits = 0;     // bits per element at the calibration dump's T (per-head: mean over heads)
  double error = 0;    // the metric measured for this layer on the calibration dump (per-head: summed)
  std::vector<PlanHead> heads;  // per-head plans: one per KV head, in order; empty otherwise
};

struct Plan {
  double budget = 0;        // mean bits per element allowed
  double bits = 0;          // mean bits of the chosen methods at `tokens`
  std::string metric;       // kl, score_mse or out_rel_err
  std::string calibration;  // the dump it was measured on, its model and tokens, the queries
  int64_t num_layers = 0, num_kv_heads = 0, head_dim = 0, tokens = 0;
  std::vector<std::string> candidates;  // canonical specs, in menu order
  std::vector<PlanLayer> layers;        // one per layer, in order
  bool per_head = false;                // file version 2: every layer lists its KV heads
};

// The default menu: kivi and kitty at 2-4 bits (keys and values apart, boost 1/8 to 1/2) and int8.
const std::vector<std::string>& default_plan_candidates();

// error[l][m]: the error of candidate m on unit l (a layer, or a (layer, KV head) of a per-head
// plan); bits[m]: its bits per element. Returns the candidate of each unit that minimises
// sum_l error[l][m_l] subject to mean_l bits[m_l] <= budget: an exact dynamic program over units
// (multiple-choice knapsack) with bits counted in units of 1e-3 rounded up, so the plan never
// exceeds the budget. Throws std::invalid_argument when even the cheapest candidate exceeds it,
// for empty or ragged input, more than 255 candidates, or a table beyond 2^27 entries (units x
// the bits between the cheapest choice and the budget, in 1e-3).
std::vector<int> choose_plan(const std::vector<std::vector<double>>& error, const std::vector<double>& bits,
                             double budget);

std::string plan_to_json(const Plan& p);
// Throws std::runtime_error naming the file and the field for anything but a well-formed plan.
Plan read_plan_file(const std::string& path);

// Adds the `plan` family (plan:file=PATH) to the method registry; later calls do nothing.
void register_plan_method();

}  // namespace kvlab
