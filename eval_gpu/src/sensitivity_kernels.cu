// Kernels of the CUDA sensitivity unit: fp64 throughout, the CPU's expm1 polynomials.
#include <math_constants.h>

#include "sensitivity_kernels.h"

namespace kvlab::gpu_eval {

namespace {

constexpr int kThreads = 256, kWarps = kThreads / 32;

// As sensitivity_kernel.cpp: Taylor coefficients 1/k!, computed the same way.
__host__ __device__ constexpr double inv_factorial(int k) { return k <= 1 ? 1.0 : inv_factorial(k - 1) / k; }

template <int K, int Deg>
__device__ __forceinline__ double horner(double x) {
  constexpr double c = inv_factorial(K);
  if constexpr (K == Deg)
    return c;
  else
    return horner<K + 1, Deg>(x) * x + c;
}

// The CPU's horner<K, deg>(x) for any deg <= 10 without a branch: coefficients above deg are 0,
// so the first steps give exactly 0 and the rest the CPU's operations.
template <int K>
__device__ __forceinline__ double masked_horner(double x, int deg) {
  constexpr double c = inv_factorial(K);
  if constexpr (K == 10)
    return deg >= 10 ? c : 0.0;
  else
    return masked_horner<K + 1>(x, deg) * x + (K <= deg ? c : 0.0);
}

// The CPU's exp_bounded (|d| <= 300): 2^n exp(r), exp(r) by Taylor to degree 12.
__device__ __forceinline__ double exp_bounded(double d) {
  constexpr double kLog2e = 1.4426950408889634, kLn2 = 0.6931471805599453, kShifter = 0x1.8p52;
  constexpr long long kShifterBits = 0x4338000000000000LL;
  const double t = d * kLog2e + kShifter;
  const double n = t - kShifter;
  const double r = d - n * kLn2;
  const double p = horner<0, 12>(r);
  const long long bits = (__double_as_longlong(t) - kShifterBits + 1023) << 52;
  return p * __longlong_as_double(bits);
}

// The CPU's choice for a (query, channel) whose largest |d| is dmax: Taylor of degree 4, 7 or 10,
// or (deg 0) Taylor 10 up to |d| 0.5 and exp_bounded - 1 beyond. Past 300 the CPU recomputes
// from the logits (the host does it; the sums here are not used).
__device__ __forceinline__ int degree_for(double dmax) {
  return dmax <= 0.01 ? 4 : dmax <= 0.1 ? 7 : dmax <= 0.5 ? 10 : 0;
}
__device__ __forceinline__ double expm1_cpu(double d, int deg) {
  if (deg == 0) return fabs(d) <= 0.5 ? horner<1, 10>(d) * d : exp_bounded(d) - 1.0;
  return masked_horner<1>(d, deg) * d;
}

// Block-wide sum in a fixed order; every thread gets it.
__device__ double block_sum(double x) {
  __shared__ double s[kWarps];
  for (int o = 16; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) s[warp] = x;
  __syncthreads();
  x = 0;
  for (int w = 0; w < kWarps; ++w) x += s[w];
  __syncthreads();
  return x;
}
__device__ double block_max(double x) {
  __shared__ double s[kWarps];
  for (int o = 16; o > 0; o /= 2) x = fmax(x, __shfl_xor_sync(0xffffffffu, x, o));
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) s[warp] = x;
  __syncthreads();
  x = s[0];
  for (int w = 1; w < kWarps; ++w) x = fmax(x, s[w]);
  __syncthreads();
  return x;
}

__global__ void scale_kernel(const float* src, double* dst, int64_t n, double scale) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    dst[i] = (double)src[i] * scale;
}

// One block per row.
__global__ void softmax_kernel(double* S, int64_t ld, int64_t width, const int32_t* vis, double* s0) {
  double* p = S + blockIdx.x * ld;
  const int n = vis[blockIdx.x];
  double m = -CUDART_INF;
  for (int j = threadIdx.x; j < n; j += kThreads) m = fmax(m, p[j]);
  m = block_max(m);
  double z = 0;
  for (int j = threadIdx.x; j < n; j += kThreads) z += (p[j] = exp(p[j] - m));
  const double inv = 1.0 / block_sum(z);
  double sq = 0;
  for (int64_t j = threadIdx.x; j < width; j += kThreads) {
    const double x = j < n ? p[j] * inv : 0.0;
    p[j] = x;
    sq += x * x;
  }
  sq = block_sum(sq);
  if (threadIdx.x == 0) s0[blockIdx.x] = sq;
}

// A tile of 32 rows x 32 channels per block, keys in chunks of 32 through shared memory; each
// thread sums 2 rows x 2 channels, keys in order.
constexpr int kTile = 32, kKeys = 32;
__global__ void __launch_bounds__(kThreads)
    channel_sums_kernel(const double* P, int64_t ld, const double* qs, const double* delta,
                        const double* absmax, int64_t rows, int64_t D, int64_t n, double* abc) {
  __shared__ double sp[kTile][kKeys + 1], sd[kTile][kKeys + 1];
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int64_t r0 = blockIdx.x * (int64_t)kTile, c0 = blockIdx.y * (int64_t)kTile;
  double a[2][2], acc[2][2][3] = {};
  int deg[2][2];
  for (int x = 0; x < 2; ++x)
    for (int y = 0; y < 2; ++y) {
      const int64_t r = r0 + ty + 16 * x, c = c0 + tx + 16 * y;
      a[x][y] = r < rows && c < D ? qs[r * D + c] : 0.0;
      deg[x][y] = degree_for(fabs(a[x][y]) * (c < D ? absmax[c] : 0.0));
    }
  for (int64_t j0 = 0; j0 < n; j0 += kKeys) {
    for (int e = threadIdx.x; e < kTile * kKeys; e += kThreads) {
      const int i = e / kKeys, jj = e % kKeys;
      const int64_t j = j0 + jj, r = r0 + i, c = c0 + i;
      sp[i][jj] = r < rows && j < n ? P[r * ld + j] : 0.0;
      sd[i][jj] = c < D && j < n ? delta[c * n + j] : 0.0;
    }
    __syncthreads();
    for (int jj = 0; jj < kKeys; ++jj) {
      const double p[2] = {sp[ty][jj], sp[ty + 16][jj]}, d[2] = {sd[tx][jj], sd[tx + 16][jj]};
#pragma unroll
      for (int x = 0; x < 2; ++x) {
        const double p2 = p[x] * p[x];
#pragma unroll
        for (int y = 0; y < 2; ++y) {
          const double em = expm1_cpu(a[x][y] * d[y], deg[x][y]);
          acc[x][y][0] += p[x] * em;
          acc[x][y][1] += p2 * em;
          acc[x][y][2] += p2 * em * em;
        }
      }
    }
    __syncthreads();
  }
  for (int x = 0; x < 2; ++x)
    for (int y = 0; y < 2; ++y) {
      const int64_t r = r0 + ty + 16 * x, c = c0 + tx + 16 * y;
      if (r < rows && c < D)
        for (int k = 0; k < 3; ++k) abc[(r * D + c) * 3 + k] = acc[x][y][k];
    }
}

int grid_for(int64_t n) {
  return (int)((n + kThreads - 1) / kThreads < 65535 ? (n + kThreads - 1) / kThreads : 65535);
}

}  // namespace

void scale_to_f64(const float* src, double* dst, int64_t n, double scale, cudaStream_t s) {
  if (n > 0) scale_kernel<<<grid_for(n), kThreads, 0, s>>>(src, dst, n, scale);
}

void softmax_rows(double* S, int64_t ld, int64_t width, const int32_t* vis, int64_t rows, double* s0,
                  cudaStream_t s) {
  if (rows > 0) softmax_kernel<<<(unsigned)rows, kThreads, 0, s>>>(S, ld, width, vis, s0);
}

void channel_sums(const double* P, int64_t ld, const double* qs, const double* delta, const double* absmax,
                  int64_t rows, int64_t D, int64_t n, double* abc, cudaStream_t s) {
  if (rows == 0 || D == 0) return;
  const dim3 grid((unsigned)((rows + kTile - 1) / kTile), (unsigned)((D + kTile - 1) / kTile));
  channel_sums_kernel<<<grid, kThreads, 0, s>>>(P, ld, qs, delta, absmax, rows, D, n, abc);
}

}  // namespace kvlab::gpu_eval
