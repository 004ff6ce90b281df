// Sizes made from user-given numbers: products that cannot overflow, allocations the machine can
// hold. A shape like tokens x heads x head_dim from the command line must fail with its name
// before it wraps around int64 or asks for more memory than there is.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>

namespace kvlab {

// a x b x ... of non-negative factors; throws std::invalid_argument naming `what` (e.g.
// "--tokens x --head-dim") when a factor is negative or the product exceeds int64.
inline int64_t checked_product(std::initializer_list<int64_t> factors, const std::string& what) {
  int64_t out = 1;
  std::string shown;
  for (int64_t f : factors) shown += (shown.empty() ? "" : " x ") + std::to_string(f);
  for (int64_t f : factors) {
    if (f < 0) throw std::invalid_argument(what + ": " + shown + " has a negative factor");
    if (__builtin_mul_overflow(out, f, &out))
      throw std::invalid_argument(what + ": " + shown + " overflows a 64-bit size");
  }
  return out;
}

// Physical memory in bytes (0 when the system does not say).
inline double physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? (double)pages * (double)page : 0.0;
}

// Refuses an allocation of `elements` x `element_bytes` larger than the machine's memory, naming
// `what`; a zero-filled vector that size would be killed by the OOM killer instead of failing.
inline void check_fits_memory(int64_t elements, int64_t element_bytes, const std::string& what) {
  const double bytes = (double)elements * (double)element_bytes, have = physical_memory_bytes();
  if (have > 0 && bytes > have)
    throw std::invalid_argument(what + " needs " + std::to_string((int64_t)(bytes / (1 << 20))) +
                                " MiB of memory; this machine has " +
                                std::to_string((int64_t)(have / (1 << 20))) + " MiB");
}

}  // namespace kvlab
