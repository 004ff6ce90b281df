// Integer hashes for counter-based random numbers, shared by the CPU (synthetic dumps, test
// data) and the GPU (validation data): the same function on both sides gives the same bytes.
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define KV_HASH_HD __host__ __device__ __forceinline__
#else
#define KV_HASH_HD inline
#endif

namespace kvlab {

constexpr uint64_t kGoldenGamma = 0x9e3779b97f4a7c15ull;  // 2^64 / golden ratio, splitmix64's step

// splitmix64's finalizer: a bijection on 64 bits with full avalanche.
KV_HASH_HD uint64_t splitmix64_mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

// MurmurHash3's 64-bit finalizer (fmix64).
KV_HASH_HD uint64_t murmur3_fmix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

}  // namespace kvlab
