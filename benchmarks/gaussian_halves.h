// The benchmarks' input: n standard-normal values as fp16 bits, the same stream (mt19937, seed 1)
// for every benchmark so their figures describe the same data.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

#include "kvlab/half.h"

inline std::vector<uint16_t> gaussian_halves(int64_t n) {
  std::vector<uint16_t> v(n);
  std::mt19937 rng(1);
  std::normal_distribution<float> g;
  for (auto& h : v) h = kvlab::float_to_half(g(rng));
  return v;
}
