// The metric fields shared by every level of the JSON and CSV reports (method, layer, head),
// in one list so both writers print the same names in the same order.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "kvlab/evaluate.h"

namespace kvlab::detail {

using Fields = std::vector<std::pair<std::string, double>>;

inline Fields metric_fields(const Bits& bits, const ReconStats& k, const ReconStats& v, const AttnStats& a) {
  return {{"bits_per_element", bits.both()},
          {"key_bits_per_element", bits.key},
          {"value_bits_per_element", bits.value},
          {"key_mse", k.mse()},
          {"key_max_abs", k.max_abs},
          {"value_mse", v.mse()},
          {"value_max_abs", v.max_abs},
          {"attn_score_mse", a.score_mse()},
          {"attn_output_rel_err", a.out_rel_err()},
          {"kl", a.kl()},
          {"topk_overlap", a.topk_overlap()}};
}

// Shortest decimal that reads back to the same double; "null" for NaN and Inf.
std::string json_number(double v);

}  // namespace kvlab::detail
