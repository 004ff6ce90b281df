// Internal: sizes computed from what a file claims. A product that overflows, or a claim larger
// than the file can hold, is an error naming the file before anything is allocated.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "kvlab/tensor.h"

namespace kvlab::detail {

// a * b, or throws std::runtime_error(where + ": " + what + " overflows") on overflow.
inline uint64_t checked_mul(uint64_t a, uint64_t b, const std::string& where, const std::string& what) {
  uint64_t r;
  if (__builtin_mul_overflow(a, b, &r)) throw std::runtime_error(where + ": " + what + " overflows 64 bits");
  return r;
}

// Bytes of an array of `shape` with `item` bytes per element; throws for negative dimensions
// and for totals that overflow or exceed INT64_MAX (no file holds that much).
inline uint64_t checked_bytes(const std::vector<int64_t>& shape, uint64_t item, const std::string& where) {
  uint64_t n = item;
  for (int64_t d : shape)
    if (d < 0) throw std::runtime_error(where + ": negative dimension in shape " + shape_string(shape));
  for (int64_t d : shape)
    if (d == 0) return 0;
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(n, (uint64_t)d, &n) || n > (uint64_t)INT64_MAX)
      throw std::runtime_error(where + ": shape " + shape_string(shape) + " of " + std::to_string(item) +
                               "-byte elements is larger than any file (the byte count overflows)");
  }
  return n;
}

}  // namespace kvlab::detail
