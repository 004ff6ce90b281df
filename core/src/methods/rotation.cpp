#include "rotation.h"

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "kvlab/hash.h"

namespace kvlab::methods {

float hadamard_sign(uint64_t seed, int64_t c) {
  return (murmur3_fmix64(seed * kGoldenGamma + (uint64_t)c) >> 63) ? -1.0f : 1.0f;
}

bool is_power_of_two(int64_t D) { return D > 0 && (D & (D - 1)) == 0; }

namespace {

// In-place fast Walsh-Hadamard transform of one row (unnormalized): log2(D) passes of sums
// and differences, in a fixed order.
void fwht(float* x, int64_t D) {
  for (int64_t h = 1; h < D; h *= 2)
    for (int64_t i = 0; i < D; i += 2 * h)
      for (int64_t j = i; j < i + h; ++j) {
        const float a = x[j], b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
}

}  // namespace

void hadamard_rows(float* x, int64_t rows, int64_t D, uint64_t seed, bool inverse) {
  if (!is_power_of_two(D))
    throw std::invalid_argument("rot=hadamard needs a head_dim that is a power of two, got " +
                                std::to_string(D));
  std::vector<float> sign(D);
  for (int64_t c = 0; c < D; ++c) sign[c] = hadamard_sign(seed, c);
  const float norm = (float)(1.0 / std::sqrt((double)D));
  for (int64_t r = 0; r < rows; ++r) {
    float* row = x + r * D;
    if (!inverse)
      for (int64_t c = 0; c < D; ++c) row[c] *= sign[c];
    fwht(row, D);
    for (int64_t c = 0; c < D; ++c) row[c] *= inverse ? norm * sign[c] : norm;
  }
}

}  // namespace kvlab::methods
