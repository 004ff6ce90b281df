// RoPE in the runner's arithmetic (models/src/transformer_math.cpp: rope_cos_sin, rope_row).
#include "kvlab/rope.h"

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

namespace kvlab {

void apply_rope(float* x, int64_t T, int64_t D, RopeStyle style, float theta, int64_t first_pos) {
  if (style == RopeStyle::None) return;
  if (D % 2 != 0) throw std::invalid_argument("RoPE: head_dim " + std::to_string(D) + " is odd");
  const int64_t half = D / 2;
  const int64_t stride = style == RopeStyle::Halves ? 1 : 2, gap = style == RopeStyle::Halves ? half : 1;
  std::vector<float> freq(half);
  for (int64_t i = 0; i < half; ++i) freq[i] = 1.0f / std::pow(theta, (float)(2 * i) / (float)D);
  for (int64_t t = 0; t < T; ++t) {
    float* row = x + t * D;
    for (int64_t i = 0; i < half; ++i) {
      const float angle = (float)(first_pos + t) * freq[i];
      const float c = std::cos(angle), s = std::sin(angle);
      float* a = row + i * stride;
      float* b = a + gap;
      const float x0 = *a, x1 = *b;
      *a = x0 * c - x1 * s;
      *b = x0 * s + x1 * c;
    }
  }
}

}  // namespace kvlab
