// Deterministic synthetic K/V tensors shaped like a real cache: keys with a few outlier
// channels (large, slowly varying magnitude, as in KIVI's and Kitty's observations) and
// RoPE-like rotation of channel pairs; values close to Gaussian per token.
#pragma once
#include <cstdint>

#include "kvlab/tensor.h"

namespace kvlab {

struct SyntheticParams {
  int64_t heads = 4;                // KV heads
  int64_t tokens = 1024;            // T
  int64_t head_dim = 128;           // D
  double outlier_share = 1.0 / 16;  // share of key channels with large magnitude
  double outlier_scale = 8.0;       // their magnitude relative to the rest
  uint64_t seed = 0;                // same seed, same bytes on every machine
};

struct SyntheticKV {
  Tensor k, v;  // (heads, tokens, head_dim), fp32 values that are exactly fp16-representable
};

SyntheticKV synthetic_kv(const SyntheticParams& p);

}  // namespace kvlab
