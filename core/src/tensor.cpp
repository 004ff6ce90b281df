#include "kvlab/tensor.h"

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

void check_finite(const TensorView& x, const std::string& what) {
  const int64_t n = x.numel();
  int64_t first = n;
#pragma omp parallel for reduction(min : first) schedule(static)
  for (int64_t i = 0; i < n; ++i)
    if (i < first && !std::isfinite(x.at(i))) first = i;
  if (first < n)
    throw std::invalid_argument(what + " of shape " + shape_string(x.shape) + " holds a non-finite value (" +
                                std::to_string(x.at(first)) + ") at flat index " + std::to_string(first) +
                                "; quantization needs finite input");
}

}  // namespace kvlab
