// Randomized Hadamard rotation along head_dim (QuaRot's trick to spread outlier channels before
// low-bit quantization): y = H diag(s) x / sqrt(D) per token row, H the Sylvester Hadamard
// matrix of order D (a power of two), s_c = +-1 from the seed. The inverse, diag(s) H y / sqrt(D),
// is exact in real arithmetic (H H = D I); in fp32 each direction rounds log2(D) butterfly
// sums and one scaling, so a round trip without quantization returns x to within a few ulps.
#pragma once
#include <cstdint>

namespace kvlab::methods {

// The sign of channel c for a seed: +1 or -1.
float hadamard_sign(uint64_t seed, int64_t c);
// Rotate (or, inverse, rotate back) `rows` consecutive rows of D floats in place. D must be a
// power of two (callers check: std::invalid_argument otherwise).
void hadamard_rows(float* x, int64_t rows, int64_t D, uint64_t seed, bool inverse);
bool is_power_of_two(int64_t D);

}  // namespace kvlab::methods
