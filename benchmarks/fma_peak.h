// The machine's fp32 FMA peak, measured: every thread runs 12 independent chains of 256-bit
// (or 512-bit with AVX-512) fused multiply-adds, enough to cover the FMA latency on both pipes.
#pragma once
#include <immintrin.h>
#include <omp.h>

#include <chrono>

namespace kvlab::bench {

// Sustained GFLOP/s (2 flops per FMA lane) over all `threads`, for about `seconds`.
inline double fma_peak_gflops(int threads, double seconds = 0.5) {
#if defined(__AVX512F__)
  using V = __m512;
  constexpr int lanes = 16;
#define KVLAB_FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define KVLAB_SET1(f) _mm512_set1_ps(f)
#elif defined(__FMA__)
  using V = __m256;
  constexpr int lanes = 8;
#define KVLAB_FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define KVLAB_SET1(f) _mm256_set1_ps(f)
#else
  (void)threads;
  (void)seconds;
  return 0;  // no FMA instructions: no peak to report
#endif
#if defined(__AVX512F__) || defined(__FMA__)
  constexpr int chains = 12;
  constexpr long inner = 1 << 16;
  double total = 0;
  const auto t0 = std::chrono::steady_clock::now();
  long rounds = 0;
#pragma omp parallel num_threads(threads) reduction(+ : rounds)
  {
    V acc[chains];
    for (int c = 0; c < chains; ++c) acc[c] = KVLAB_SET1(1.0f + c * 1e-3f);
    const V a = KVLAB_SET1(0.999999f), b = KVLAB_SET1(1e-7f);
    while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < seconds) {
      for (long i = 0; i < inner; ++i)
        for (int c = 0; c < chains; ++c) acc[c] = KVLAB_FMA(acc[c], a, b);
      ++rounds;
    }
    float sink = 0;
    for (int c = 0; c < chains; ++c) sink += ((float*)&acc[c])[0];
    if (sink == 12345.0f) rounds += 1;  // keeps the chains live
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  total = 2.0 * lanes * chains * inner * (double)rounds / secs / 1e9;
  return total;
#undef KVLAB_FMA
#undef KVLAB_SET1
#endif
}

}  // namespace kvlab::bench
