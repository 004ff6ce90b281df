// Which key channels Kitty boosts: the paper's mean magnitude and the alternatives a channel
// selection study compares it with. (Named boost_selection.h: eval owns kvlab/selection.h.)
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kvlab/enum_names.h"
#include "kvlab/tensor.h"

namespace kvlab {

enum class Selector {
  Magnitude,        // per page, the k channels of largest sum |k| (Kitty's rule, as core ranks them)
  Random,           // per page, k channels drawn uniformly (seeded)
  Variance,         // per page, the k channels of largest variance
  Oracle,           // the k channels of largest measured sensitivity (given per head), every page
  PrefixMagnitude,  // the k channels of largest mean |k| on a calibration prefix (given per
                    // head), every page: a static control that separates "measured
                    // sensitivity" from "chosen once per head" in the oracle's result
};

template <>
struct EnumNames<Selector> {
  static constexpr EnumName<Selector> names[] = {{Selector::Magnitude, "magnitude"},
                                                 {Selector::Random, "random"},
                                                 {Selector::Variance, "variance"},
                                                 {Selector::Oracle, "oracle"},
                                                 {Selector::PrefixMagnitude, "prefix-magnitude"}};
};
inline const char* to_string(Selector s) { return enum_name(s); }
// Throws std::invalid_argument naming `--selectors` and listing the valid names.
Selector parse_selector(const std::string& name);
// "magnitude,random": a comma list without repeats; throws for empty items, repeats, unknown names.
std::vector<Selector> parse_selectors(const std::string& list);
// Oracle and PrefixMagnitude: one channel set per head, from scores measured on a prefix.
inline bool is_static(Selector s) { return s == Selector::Oracle || s == Selector::PrefixMagnitude; }

// Boosted channels for Kitty pages: keys (H, n, D) are the quantized key range of H heads, cut
// into pages of G tokens (n a multiple of G). Returns k channels per (head, page), row h * P + p,
// ascending, the form core's quantize(x, spec, boost_channels) takes. static_scores holds H * D
// scores (used by the static selectors Oracle and PrefixMagnitude; larger = boost first). Ties
// go to the lower channel. Throws std::invalid_argument for k outside [0, D], G < 1, n not a
// multiple of G, or a wrong number of static scores. first_head: the model's index of keys' head 0
// (Random draws per (seed, model head, page), so a slice of heads draws what the whole layer does).
std::vector<int32_t> select_boost_channels(Selector s, const Tensor& keys, int64_t G, int64_t k,
                                           uint64_t seed, const std::vector<double>& static_scores = {},
                                           int64_t first_head = 0);

}  // namespace kvlab
