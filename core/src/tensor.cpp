#include "kvlab/tensor.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "kvlab/half.h"

namespace kvlab {

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

int64_t TensorView::numel() const { return kvlab::numel(shape); }

float TensorView::at(int64_t i) const {
  if (dtype == DType::F16) return half_to_float(static_cast<const uint16_t*>(data)[i]);
  return static_cast<const float*>(data)[i];
}

namespace {
// Index of the first NaN/Inf (all exponent bits set), or n. Integer tests vectorize.
template <class Bits>
int64_t first_non_finite(const Bits* v, int64_t n, Bits exp_mask) {
  const int64_t block = 1 << 16;
  int64_t first = n;
#pragma omp parallel for schedule(static) reduction(min : first)
  for (int64_t b = 0; b < n; b += block) {
    const int64_t e = std::min(n, b + block);
    bool bad = false;
    for (int64_t i = b; i < e; ++i) bad |= (v[i] & exp_mask) == exp_mask;
    if (bad)
      for (int64_t i = b; i < e; ++i)
        if ((v[i] & exp_mask) == exp_mask) {
          first = std::min(first, i);
          break;
        }
  }
  return first;
}
}  // namespace

void check_finite(const TensorView& x, const std::string& what) {
  const int64_t n = x.numel();
  const int64_t first = x.dtype == DType::F16
                            ? first_non_finite(static_cast<const uint16_t*>(x.data), n, (uint16_t)0x7c00)
                            : first_non_finite(static_cast<const uint32_t*>(x.data), n, 0x7f800000u);
  if (first < n)
    throw std::invalid_argument(what + " of shape " + shape_string(x.shape) + " holds a non-finite value (" +
                                std::to_string(x.at(first)) + ") at flat index " + std::to_string(first) +
                                "; quantization needs finite input");
}

}  // namespace kvlab
