// k-means for many problems at once (kvlab_gpu/kmeans.h): assignment in the CPU's fixed
// arithmetic, a stable radix sort of the points by centroid, double sums in point order, the
// CPU's split of empty clusters. One launch sequence per iteration for all problems of a chunk.
#include <cuda_runtime.h>
#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "kmeans_device.cuh"
#include "kvlab_gpu/kmeans.h"

namespace kvlab::gpu {

namespace {

using detail::check;
using detail::DeviceBuffer;

constexpr int kThreads = 256;
constexpr int kSmemFloats = 4096;  // centroid tile in shared memory: tile x (d + 1) floats (16 KiB)

// Points per thread: more points share each centroid read while registers allow.
template <int D>
__host__ __device__ constexpr int points_per_thread() {
  return D <= 8 ? 4 : (D <= 16 ? 2 : 1);
}

// Nearest centroid of points of problem blockIdx.y: f = ||c||^2 - 2 x.c, ||c||^2 as rounded
// products added in order, then one FMA per coordinate, strict < over increasing index (the
// CPU's kmeans_assign.h). Writes assign (if set) and the sort key p_local * k + a (if set).
template <int D>
__global__ void assign_kernel(const float* __restrict__ x, int64_t n, int k, const float* __restrict__ cent,
                              int32_t* __restrict__ assign, uint32_t* __restrict__ keys) {
  constexpr int R = points_per_thread<D>();
  __shared__ float sc[kSmemFloats];
  const int tile = kSmemFloats / (D + 1);
  float* sn = sc + tile * D;
  const int64_t p = blockIdx.y;
  const float* xp = x + p * n * D;
  const float* cp = cent + p * (int64_t)k * D;
  float xm2[R][D], best[R];
  int bi[R];
  const int64_t i0 = (int64_t)blockIdx.x * blockDim.x * R + threadIdx.x;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int64_t i = i0 + (int64_t)r * blockDim.x;
#pragma unroll
    for (int j = 0; j < D; ++j) xm2[r][j] = i < n ? __fmul_rn(-2.0f, xp[i * D + j]) : 0.0f;
    best[r] = __int_as_float(0x7f800000);  // +inf
    bi[r] = 0;
  }
  for (int t0 = 0; t0 < k; t0 += tile) {
    const int tn = min(tile, k - t0);
    __syncthreads();
    for (int e = threadIdx.x; e < tn * D; e += blockDim.x) sc[e] = cp[(int64_t)t0 * D + e];
    __syncthreads();
    for (int c = threadIdx.x; c < tn; c += blockDim.x) {
      float s = 0.0f;
#pragma unroll
      for (int j = 0; j < D; ++j) s = __fadd_rn(s, __fmul_rn(sc[c * D + j], sc[c * D + j]));
      sn[c] = s;
    }
    __syncthreads();
    for (int c = 0; c < tn; ++c) {
      float cv[D];
#pragma unroll
      for (int j = 0; j < D; ++j) cv[j] = sc[c * D + j];
      const float nc = sn[c];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        float acc = nc;
#pragma unroll
        for (int j = 0; j < D; ++j) acc = __fmaf_rn(cv[j], xm2[r][j], acc);
        if (acc < best[r]) {
          best[r] = acc;
          bi[r] = t0 + c;
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int64_t i = i0 + (int64_t)r * blockDim.x;
    if (i >= n) continue;
    if (assign) assign[p * n + i] = bi[r];
    if (keys) keys[p * n + i] = (uint32_t)(p * k + bi[r]);
  }
}

__global__ void iota_kernel(uint32_t* v, int64_t count) {
  for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < count;
       t += (int64_t)gridDim.x * blockDim.x)
    v[t] = (uint32_t)t;
}

// Each (problem, centroid) key's run [start, end) in the sorted keys; keys with no point keep 0, 0.
__global__ void bounds_kernel(const uint32_t* __restrict__ sk, int64_t count, uint32_t* start,
                              uint32_t* end) {
  for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < count;
       t += (int64_t)gridDim.x * blockDim.x) {
    const uint32_t key = sk[t];
    if (t == 0 || sk[t - 1] != key) start[key] = (uint32_t)t;
    if (t == count - 1 || sk[t + 1] != key) end[key] = (uint32_t)(t + 1);
  }
}

// One thread per (problem, centroid, coordinate): the sum in double over the centroid's points in
// point order (the sorted values are point indices, increasing within a key), divided by the
// count in double and rounded to float, as the CPU's update; mass = the count. Empty: unchanged.
__global__ void update_kernel(const float* __restrict__ x, int d, int64_t keys,
                              const uint32_t* __restrict__ start, const uint32_t* __restrict__ end,
                              const uint32_t* __restrict__ order, float* __restrict__ cent,
                              double* __restrict__ mass) {
  for (int64_t g = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; g < keys * d;
       g += (int64_t)gridDim.x * blockDim.x) {
    const int64_t key = g / d;
    const int j = (int)(g % d);
    const uint32_t s = start[key], e = end[key];
    if (j == 0) mass[key] = (double)(e - s);
    if (e == s) continue;
    double acc = 0;
    for (uint32_t t = s; t < e; ++t) acc = __dadd_rn(acc, (double)x[(int64_t)order[t] * d + j]);
    cent[g] = __double2float_rn(__ddiv_rn(acc, (double)(e - s)));
  }
}

// The CPU's split_empty (largest rule), one thread per problem: an empty cluster takes a copy of
// the heaviest (first of equals), both nudged by a relative 1/1024 in alternating directions.
__global__ void split_kernel(int64_t problems, int k, int d, float* cent, double* mass) {
  const int64_t p = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (p >= problems) return;
  double* m = mass + p * k;
  float* c = cent + p * (int64_t)k * d;
  const float eps = 1.0f / 1024.0f;
  for (int ci = 0; ci < k; ++ci) {
    if (m[ci] > 0) continue;
    int cj = 0;
    for (int t = 1; t < k; ++t)
      if (m[t] > m[cj]) cj = t;
    for (int j = 0; j < d; ++j) {
      const float s = (j % 2 == 0) ? eps : -eps;
      c[ci * d + j] = __fmul_rn(c[cj * d + j], __fadd_rn(1.0f, s));
      c[cj * d + j] = __fmul_rn(c[cj * d + j], __fsub_rn(1.0f, s));
    }
    m[ci] = m[cj] / 2;
    m[cj] = m[cj] - m[ci];
  }
}

__global__ void count_kernel(const int32_t* __restrict__ assign, int64_t n, int k, int64_t total,
                             unsigned long long* counts) {
  for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < total;
       t += (int64_t)gridDim.x * blockDim.x)
    atomicAdd(&counts[(t / n) * k + assign[t]], 1ull);
}

int grid_for(int64_t count) { return (int)std::min<int64_t>((count + kThreads - 1) / kThreads, 1 << 20); }

void launch_assign(const float* x, const KMeansShape& s, int64_t problems, const float* cent, int32_t* assign,
                   uint32_t* keys) {
  auto go = [&](auto kernel, int R) {
    const dim3 grid((unsigned)((s.n + (int64_t)kThreads * R - 1) / ((int64_t)kThreads * R)),
                    (unsigned)problems);
    kernel<<<grid, kThreads>>>(x, s.n, (int)s.k, cent, assign, keys);
  };
  switch (s.d) {
    case 1: go(assign_kernel<1>, points_per_thread<1>()); break;
    case 2: go(assign_kernel<2>, points_per_thread<2>()); break;
    case 3: go(assign_kernel<3>, points_per_thread<3>()); break;
    case 4: go(assign_kernel<4>, points_per_thread<4>()); break;
    case 5: go(assign_kernel<5>, points_per_thread<5>()); break;
    case 6: go(assign_kernel<6>, points_per_thread<6>()); break;
    case 7: go(assign_kernel<7>, points_per_thread<7>()); break;
    case 8: go(assign_kernel<8>, points_per_thread<8>()); break;
    case 16: go(assign_kernel<16>, points_per_thread<16>()); break;
    case 32: go(assign_kernel<32>, points_per_thread<32>()); break;
    default: throw std::invalid_argument("gpu kmeans: d = " + std::to_string(s.d) + " not compiled");
  }
  check(cudaGetLastError(), "assign kernel");
}

// Problems per chunk: the sort buffers (16 bytes a point) stay near 1 GiB, keys fit in 32 bits and
// problems in gridDim.y.
int64_t chunk_problems(const KMeansShape& s) {
  const int64_t by_points = std::max<int64_t>(1, ((int64_t)1 << 26) / s.n);
  const int64_t by_keys = std::max<int64_t>(1, (((int64_t)1 << 32) - 1) / s.k);
  return std::max<int64_t>(1, std::min({s.problems, by_points, by_keys, (int64_t)65535}));  // grid.y
}

int key_bits(int64_t keys) {
  int b = 1;
  while (b < 32 && ((int64_t)1 << b) < keys) ++b;
  return b;
}

// One chunk of problems, all on the device.
void run_chunk(const float* x, const KMeansShape& s, int64_t problems, int iters, float* cent,
               int32_t* assign) {
  const int64_t N = problems * s.n, K = problems * s.k;
  if (iters > 0) {
    DeviceBuffer<uint32_t> keys(N), skeys(N), vals(N), order(N), start(K), end(K);
    DeviceBuffer<double> mass(K);
    size_t temp_bytes = 0;
    const int bits = key_bits(K);
    check(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys.p, skeys.p, vals.p, order.p, N, 0, bits),
          "radix sort size");
    DeviceBuffer<unsigned char> temp(temp_bytes);
    iota_kernel<<<grid_for(N), kThreads>>>(vals.p, N);
    for (int it = 0; it < iters; ++it) {
      launch_assign(x, s, problems, cent, nullptr, keys.p);
      check(cub::DeviceRadixSort::SortPairs(temp.p, temp_bytes, keys.p, skeys.p, vals.p, order.p, N, 0, bits),
            "radix sort");
      check(cudaMemsetAsync(start.p, 0, K * sizeof(uint32_t)), "memset");
      check(cudaMemsetAsync(end.p, 0, K * sizeof(uint32_t)), "memset");
      bounds_kernel<<<grid_for(N), kThreads>>>(skeys.p, N, start.p, end.p);
      update_kernel<<<grid_for(K * s.d), kThreads>>>(x, (int)s.d, K, start.p, end.p, order.p, cent, mass.p);
      split_kernel<<<grid_for(problems), kThreads>>>(problems, (int)s.k, (int)s.d, cent, mass.p);
      check(cudaGetLastError(), "update kernels");
    }
  }
  if (assign) launch_assign(x, s, problems, cent, assign, nullptr);
  check(cudaDeviceSynchronize(), "kmeans");
}

}  // namespace

void check_kmeans_shape(const KMeansShape& s) {
  auto bad = [](const std::string& m) { throw std::invalid_argument("gpu kmeans: " + m); };
  if (s.problems < 1) bad("problems must be >= 1, got " + std::to_string(s.problems));
  if (!(s.d >= 1 && s.d <= 8) && s.d != 16 && s.d != 32)
    bad("d (dimension) must be 1..8, 16 or 32 on the GPU, got " + std::to_string(s.d));
  if (s.k < 1 || s.k > 65536) bad("k must be 1..65536 on the GPU, got " + std::to_string(s.k));
  if (s.n < s.k)
    bad("k (" + std::to_string(s.k) + ") is larger than the number of points n (" + std::to_string(s.n) +
        ")");
  if (s.n > ((int64_t)1 << 26))
    bad("n must be <= 2^26 points per problem on the GPU, got " + std::to_string(s.n));
}

void kmeans_batch_device(const float* x, const KMeansShape& s, int iters, float* cent, int32_t* assign) {
  check_kmeans_shape(s);
  if (iters < 0) throw std::invalid_argument("gpu kmeans: iters must be >= 0, got " + std::to_string(iters));
  const int64_t cp = chunk_problems(s);
  for (int64_t p0 = 0; p0 < s.problems; p0 += cp) {
    const int64_t np = std::min(cp, s.problems - p0);
    run_chunk(x + p0 * s.n * s.d, s, np, iters, cent + p0 * s.k * s.d, assign ? assign + p0 * s.n : nullptr);
  }
}

void kmeans_batch(const float* x, const KMeansShape& s, int iters, float* cent, int32_t* assign,
                  KMeansPlusPlus* pp) {
  check_kmeans_shape(s);
  const int64_t cp = chunk_problems(s);
  DeviceBuffer<float> dx(cp * s.n * s.d), dc(cp * s.k * s.d);
  DeviceBuffer<int32_t> da(assign ? cp * s.n : 0);
  for (int64_t p0 = 0; p0 < s.problems; p0 += cp) {
    const int64_t np = std::min(cp, s.problems - p0);
    KMeansShape c = s;
    c.problems = np;
    check(cudaMemcpy(dx.p, x + p0 * s.n * s.d, np * s.n * s.d * sizeof(float), cudaMemcpyHostToDevice),
          "copy x");
    if (pp) {
      const auto t = std::chrono::steady_clock::now();
      kmeanspp_device(dx.p, c, pp->seed, dc.p);
      pp->seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
    } else {
      check(cudaMemcpy(dc.p, cent + p0 * s.k * s.d, np * s.k * s.d * sizeof(float), cudaMemcpyHostToDevice),
            "copy c");
    }
    kmeans_batch_device(dx.p, c, iters, dc.p, da.p);
    check(cudaMemcpy(cent + p0 * s.k * s.d, dc.p, np * s.k * s.d * sizeof(float), cudaMemcpyDeviceToHost),
          "copy c");
    if (assign)
      check(cudaMemcpy(assign + p0 * s.n, da.p, np * s.n * sizeof(int32_t), cudaMemcpyDeviceToHost),
            "copy assign");
  }
}

void nearest_batch(const float* x, const KMeansShape& s, const float* cent, int32_t* assign,
                   int64_t* counts) {
  check_kmeans_shape(s);
  const int64_t cp = chunk_problems(s);
  DeviceBuffer<float> dx(cp * s.n * s.d), dc(cp * s.k * s.d);
  DeviceBuffer<int32_t> da(cp * s.n);
  DeviceBuffer<unsigned long long> dn(cp * s.k);
  for (int64_t p0 = 0; p0 < s.problems; p0 += cp) {
    const int64_t np = std::min(cp, s.problems - p0);
    KMeansShape c = s;
    c.problems = np;
    check(cudaMemcpy(dx.p, x + p0 * s.n * s.d, np * s.n * s.d * sizeof(float), cudaMemcpyHostToDevice),
          "copy x");
    check(cudaMemcpy(dc.p, cent + p0 * s.k * s.d, np * s.k * s.d * sizeof(float), cudaMemcpyHostToDevice),
          "copy c");
    launch_assign(dx.p, c, np, dc.p, da.p, nullptr);
    check(cudaMemset(dn.p, 0, np * s.k * sizeof(unsigned long long)), "memset");
    count_kernel<<<grid_for(np * s.n), kThreads>>>(da.p, s.n, (int)s.k, np * s.n, dn.p);
    check(cudaGetLastError(), "count kernel");
    check(cudaDeviceSynchronize(), "nearest");
    if (assign)
      check(cudaMemcpy(assign + p0 * s.n, da.p, np * s.n * sizeof(int32_t), cudaMemcpyDeviceToHost),
            "copy assign");
    if (counts) {
      static_assert(sizeof(unsigned long long) == sizeof(int64_t), "64-bit counts");
      check(cudaMemcpy(counts + p0 * s.k, dn.p, np * s.k * sizeof(int64_t), cudaMemcpyDeviceToHost),
            "copy counts");
    }
  }
}

namespace {
__device__ uint64_t mix(uint64_t z) {  // splitmix64's finalizer
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
__device__ float u01(uint64_t h) { return ((h >> 40) + 0.5f) * 0x1.0p-24f; }

__global__ void fill_points_kernel(float* x, int64_t n, int d, int64_t total, int64_t centers,
                                   uint64_t seed) {
  for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < total;
       t += (int64_t)gridDim.x * blockDim.x) {
    const int64_t pt = t / d, p = pt / n;
    const int j = (int)(t % d);
    const uint64_t c = mix(seed ^ mix(pt * 2 + 1)) % (uint64_t)centers;
    const uint64_t hc = mix(seed ^ mix(((uint64_t)p << 32) ^ (c * 64 + j) ^ 0x5555ull));
    const float mu = 3.0f * sqrtf(-2.0f * logf(u01(hc))) * cospif(2.0f * u01(mix(hc)));
    const uint64_t hx = mix(seed ^ mix((uint64_t)t * 2));
    const float g = sqrtf(-2.0f * logf(u01(hx))) * cospif(2.0f * u01(mix(hx)));
    x[t] = mu + 0.3f * g;
  }
}
__global__ void fill_starts_kernel(const float* x, float* cent, int64_t n, int64_t k, int d, int64_t total,
                                   uint64_t seed) {
  for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < total;
       t += (int64_t)gridDim.x * blockDim.x) {
    const int64_t ci = t / d, p = ci / k;
    const int64_t i = (int64_t)(mix(seed ^ mix(ci * 2 + 7)) % (uint64_t)n);
    cent[t] = x[(p * n + i) * d + t % d];
  }
}
}  // namespace

void fill_kmeans_bench(float* x, float* cent, const KMeansShape& s, int64_t centers, uint64_t seed) {
  const int64_t nx = s.problems * s.n * s.d, nc = s.problems * s.k * s.d;
  fill_points_kernel<<<grid_for(nx), kThreads>>>(x, s.n, (int)s.d, nx, centers, seed);
  fill_starts_kernel<<<grid_for(nc), kThreads>>>(x, cent, s.n, s.k, (int)s.d, nc, seed);
  check(cudaGetLastError(), "fill kernels");
  check(cudaDeviceSynchronize(), "fill");
}

}  // namespace kvlab::gpu
