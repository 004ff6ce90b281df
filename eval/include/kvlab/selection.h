// What `kvlab eval` looks at: which query positions, which layers, which methods.
// Parsing is strict; every error names the option and the value it got.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kvlab/enum_names.h"

namespace kvlab {

// Query positions evaluated (every query attends causally to keys 0..t):
//   all       every position 0..T-1
//   last:N    the last N positions T-N..T-1 (decode-like)
//   stride:N  every N-th position counting from 1: N-1, 2N-1, ... (the last position
//             T-1 is included when T is a multiple of N)
struct QuerySelection {
  enum class Mode { All, Last, Stride };
  Mode mode = Mode::All;
  int64_t n = 0;  // N of last:N and stride:N

  bool operator==(const QuerySelection&) const = default;
};
template <>
struct EnumNames<QuerySelection::Mode> {
  static constexpr EnumName<QuerySelection::Mode> names[] = {{QuerySelection::Mode::All, "all"},
                                                             {QuerySelection::Mode::Last, "last"},
                                                             {QuerySelection::Mode::Stride, "stride"}};
};
QuerySelection parse_queries(const std::string& text);  // throws std::invalid_argument
std::string to_string(const QuerySelection& q);         // "all", "last:256", "stride:8"
// The positions, ascending. Throws std::invalid_argument when N > T or T <= 0.
std::vector<int64_t> select_queries(const QuerySelection& q, int64_t tokens);

// Layers first..last, inclusive.
struct LayerRange {
  int64_t first = 0, last = -1;  // last = -1: up to the dump's last layer
};
LayerRange parse_layers(const std::string& text);  // "a-b" or "a"; throws std::invalid_argument
// Resolves last = -1 and checks the range against the dump; throws std::invalid_argument.
LayerRange resolve_layers(const LayerRange& r, int64_t num_layers);

// Split a --methods list at commas. A spec carries its own commas
// (`kitty:kbits=2,boost=0.25`), so an item `key=value` (an `=` before any `:`; values may hold
// `:`, as `calib=dump:PATH`) continues the previous one:
// "kivi-2,kitty:kbits=2,boost=0.25,int8" -> {"kivi-2", "kitty:kbits=2,boost=0.25", "int8"}.
// Throws std::invalid_argument for an empty item or a list that starts with `key=value`.
std::vector<std::string> split_method_list(const std::string& text);

// The presets compared when no --methods is given.
const std::vector<std::string>& default_eval_methods();

}  // namespace kvlab
