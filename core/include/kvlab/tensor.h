// Minimal tensor view: contiguous row-major fp16 (as uint16 bits) or fp32 data with a shape.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kvlab {

enum class DType { F16, F32 };

struct TensorView {
  const void* data = nullptr;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;  // (..., T, D)

  int64_t numel() const;
  float at(int64_t i) const;  // element i as float (fp16 converted exactly)
};

// A float32 tensor owning its data.
struct Tensor {
  std::vector<int64_t> shape;
  std::vector<float> data;
  TensorView view() const { return {data.data(), DType::F32, shape}; }
};

int64_t numel(const std::vector<int64_t>& shape);
std::string shape_string(const std::vector<int64_t>& shape);  // "(2, 16, 8)"

// Throws std::invalid_argument naming `what` and the first NaN/Inf element's flat index.
void check_finite(const TensorView& x, const std::string& what);

}  // namespace kvlab
