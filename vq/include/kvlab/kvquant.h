// KVQuant-style arithmetic (Hooper et al. 2024, "KVQuant"), the CPU reference of the `kvquant`
// method family (docs/FORMATS.md section 10): keys per channel before RoPE with non-uniform
// levels learned by 1-D k-means on calibration tokens, values per token with uniform levels,
// and dense-and-sparse outliers (the n_out elements of each token that the dense codes serve
// worst, kept in fp16 with their channel index).
#pragma once
#include <cstdint>
#include <vector>

namespace kvlab {

// Outliers kept per token of D channels: round(share * D) (0 <= share < 0.5).
int64_t kvquant_outlier_count(double share, int64_t D);

// Per-channel levels: calib is (n, D) row-major pre-RoPE keys. For each channel the
// floor(share * n / 2) lowest and highest values are dropped (the calibration's outliers), the
// rest clustered by kvlab's k-means (d = 1, k = 2^bits, k-means++ seeded 1234, 25 iterations),
// and the centroids rounded to fp16 and sorted: D x 2^bits floats, channel-major. Throws
// std::invalid_argument when a channel keeps fewer than 2^bits values.
std::vector<float> kvquant_train_levels(const float* calib, int64_t n, int64_t D, int bits, double share);

// Keys x (T, D) through the levels: each element becomes its nearest level (the lower on a
// tie); then, per token, the n_out elements with the largest |x - level| (the lower channel on a
// tie) are replaced by fp16(x). out: (T, D).
void kvquant_keys(const float* x, int64_t T, int64_t D, const std::vector<float>& levels, int bits,
                  int64_t n_out, float* out);

// Values x (T, D) per token: the n_out elements of largest |x| (the lower channel on a tie) are
// kept as fp16(x); the others are quantized asymmetrically over their own min and max with
// scale = fp16((max - min) / (2^bits - 1)), zero = fp16(min), code = clamp(rint((x - zero) /
// scale), 0, 2^bits - 1) (rint: to nearest even), x_hat = code * scale + zero (zero when
// scale is 0). out: (T, D).
void kvquant_values(const float* x, int64_t T, int64_t D, int bits, int64_t n_out, float* out);

// Bits per element of one head's T x D cache. Keys: bits per code, 2^bits fp16 levels per
// channel spread over the T tokens, and per token n_out x (16-bit value + ceil(log2 D)-bit
// channel index). Values: bits per code, fp16 scale and zero per token, the same outliers.
double kvquant_key_bits(int bits, int64_t n_out, int64_t T, int64_t D);
double kvquant_value_bits(int bits, int64_t n_out, int64_t D);

}  // namespace kvlab
