// k-means++ starts on the GPU for many problems at once (kvlab_gpu/kmeans.h): the same picks as
// the CPU's kmeans_start (vq/src/kmeans_init.cpp, KMeansInit::KMeansPP, no weights). Each pick
// runs the CPU's steps in its arithmetic: the squared distance to the last pick in double,
// coordinates in order; the D^2 mass summed in 4096-point chunks, each chunk left to right, the
// chunks in order; r = u * total walked down the chunks and then the chunk's points. The random
// numbers are the CPU's mt19937_64 stream, drawn on the host (one stream: every problem starts
// from the same seed, as kmeans_start does for each problem).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kmeans_device.cuh"
#include "kvlab_gpu/kmeans.h"

namespace kvlab::gpu {

namespace {

using detail::check;
using detail::DeviceBuffer;

constexpr int64_t kChunk = 4096;  // vq/src/kmeans_init.cpp's kChunk: it fixes the sums' order
constexpr int kThreads = 256;
constexpr unsigned kFull = 0xffffffffu;

int grid_for(int64_t count) { return (int)std::min<int64_t>((count + kThreads - 1) / kThreads, 1 << 20); }

__global__ void fill_inf_kernel(double* v, int64_t count) {
  for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < count;
       t += (int64_t)gridDim.x * blockDim.x)
    v[t] = __longlong_as_double(0x7ff0000000000000ll);
}

// md = min(md, ||x_i - c||^2) with c the problem's last pick: kmeans_init.cpp's update_min. A
// chosen point's md is then exactly 0, so md is also the CPU's sampling mass (0 for chosen points).
__global__ void update_kernel(const float* __restrict__ x, int64_t n, int d, const int64_t* __restrict__ pick,
                              double* __restrict__ md) {
  const int64_t p = blockIdx.y;  // one problem per grid row: no 64-bit division per point
  const float* c = x + (p * n + pick[p]) * d;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const float* a = x + (p * n + i) * d;
    double s = 0;
    for (int j = 0; j < d; ++j) {
      const double u = __dsub_rn((double)a[j], (double)c[j]);
      s = __dadd_rn(s, __dmul_rn(u, u));
    }
    if (s < md[p * n + i]) md[p * n + i] = s;  // (most points keep theirs: no write)
  }
}

// 4 x 32 values of v from b (lane-strided; +0 past e, which leaves a sum of non-negatives unchanged
// and is never drawn).
__device__ void load128(const double* v, int64_t b, int64_t e, int lane, double out[4]) {
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const int64_t i = b + q * 32 + lane;
    out[q] = i < e ? v[i] : 0.0;
  }
}

// One warp per (problem, chunk): the chunk's md summed left to right (every lane holds the sum;
// the values pass through shuffles in order), the next 128 values loading meanwhile.
__global__ void chunk_sums_kernel(const double* __restrict__ md, int64_t n, int64_t nc, int64_t warps,
                                  double* __restrict__ sums) {
  const int64_t w = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (w >= warps) return;
  const int64_t p = w / nc, c = w % nc;
  const int64_t b = p * n + c * kChunk, e = p * n + min(n, (c + 1) * kChunk);
  double s = 0, v[4], next[4];
  load128(md, b, e, lane, v);
  for (int64_t i0 = b; i0 < e; i0 += 128) {
    load128(md, i0 + 128, e, lane, next);
#pragma unroll
    for (int q = 0; q < 4; ++q)
#pragma unroll
      for (int l = 0; l < 32; ++l) s = __dadd_rn(s, __shfl_sync(kFull, v[q], l));  // shuffles issue ahead
#pragma unroll
    for (int q = 0; q < 4; ++q) v[q] = next[q];
  }
  if (lane == 0) sums[w] = s;
}

// One warp per problem: pick `ci` (kmeans_init.cpp's draw, then its fill of unchosen points in
// index order when no mass is left), mark it chosen and copy it into the centroids.
__global__ void draw_kernel(const float* __restrict__ x, int64_t n, int d, int64_t k, int64_t problems,
                            int64_t nc, int64_t ci, int64_t first, const double* __restrict__ u,
                            const double* __restrict__ sums, const double* __restrict__ md,
                            unsigned char* __restrict__ chosen, int64_t* __restrict__ picks,
                            float* __restrict__ cent) {
  const int64_t p = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (p >= problems) return;
  const double* cs = sums + p * nc;
  const double* m = md + p * n;
  int64_t pick = -1;
  if (ci == 0) {
    pick = first;
  } else {
    double total = 0;
    for (int64_t c = 0; c < nc; ++c) total = __dadd_rn(total, cs[c]);
    if (total > 0) {
      double r = __dmul_rn(u[ci], total);
      int64_t c = 0;
      for (; c + 1 < nc && r >= cs[c]; ++c) r = __dsub_rn(r, cs[c]);
      const int64_t b = c * kChunk, e = min(n, (c + 1) * kChunk);
      int64_t last = -1;
      for (int64_t i0 = b; i0 < e && pick < 0; i0 += 128) {
        double v[4];
        load128(m, i0, e, lane, v);
#pragma unroll
        for (int q = 0; q < 4; ++q) {  // unrolled: v and mv stay in registers
          if (pick >= 0) break;
          double mv[32];  // all 32 shuffles first, then the dependent walk
#pragma unroll
          for (int l = 0; l < 32; ++l) mv[l] = __shfl_sync(kFull, v[q], l);
#pragma unroll
          for (int l = 0; l < 32; ++l) {
            const double mi = mv[l];
            if (!(mi > 0)) continue;
            last = i0 + q * 32 + l;
            if (r < mi) {
              pick = last;
              break;
            }
            r = __dsub_rn(r, mi);
          }
        }
      }
      if (pick < 0) pick = last;  // rounding left r just past the chunk's end
    }
  }
  const unsigned char* ch = chosen + p * n;
  for (int64_t i0 = 0; pick < 0 && i0 < n; i0 += 32) {  // the first unchosen point
    const unsigned free = __ballot_sync(kFull, i0 + lane < n && !ch[i0 + lane]);
    if (free) pick = i0 + __ffs(free) - 1;
  }
  __syncwarp();
  if (lane == 0) {
    chosen[p * n + pick] = 1;
    picks[p] = pick;
  }
  for (int j = lane; j < d; j += 32) cent[(p * k + ci) * d + j] = x[(p * n + pick) * d + j];
}

}  // namespace

void kmeanspp_device(const float* x, const KMeansShape& s, uint64_t seed, float* cent) {
  check_kmeans_shape(s);
  if (s.problems > 65535)  // one grid row per problem
    throw std::invalid_argument("gpu kmeans++: at most 65535 problems per call, got " +
                                std::to_string(s.problems));
  // The CPU's stream: the first pick rng() % n, then one uniform01 per later pick (a pick drawn
  // with no mass left takes none, and none is drawn after it: mass only shrinks).
  std::mt19937_64 rng(seed);
  const int64_t first = (int64_t)(rng() % (uint64_t)s.n);
  std::vector<double> u(s.k, 0.0);
  for (int64_t ci = 1; ci < s.k; ++ci) u[ci] = (double)(rng() >> 11) * 0x1.0p-53;
  const int64_t N = s.problems * s.n, nc = (s.n + kChunk - 1) / kChunk, warps = s.problems * nc;
  DeviceBuffer<double> md(N), sums(warps), du(s.k);
  DeviceBuffer<int64_t> picks(s.problems);
  DeviceBuffer<unsigned char> chosen(N);
  check(cudaMemcpy(du.p, u.data(), s.k * sizeof(double), cudaMemcpyHostToDevice), "copy u");
  check(cudaMemsetAsync(chosen.p, 0, N), "memset");
  fill_inf_kernel<<<grid_for(N), kThreads>>>(md.p, N);
  const dim3 update_grid((unsigned)std::min<int64_t>((s.n + kThreads - 1) / kThreads, 4096),
                         (unsigned)s.problems);
  const int warp_blocks = (int)((warps * 32 + kThreads - 1) / kThreads);
  const int draw_blocks = (int)((s.problems * 32 + kThreads - 1) / kThreads);
  for (int64_t ci = 0; ci < s.k; ++ci) {
    if (ci > 0) {
      update_kernel<<<update_grid, kThreads>>>(x, s.n, (int)s.d, picks.p, md.p);
      chunk_sums_kernel<<<warp_blocks, kThreads>>>(md.p, s.n, nc, warps, sums.p);
    }
    draw_kernel<<<draw_blocks, kThreads>>>(x, s.n, (int)s.d, s.k, s.problems, nc, ci, first, du.p, sums.p,
                                           md.p, chosen.p, picks.p, cent);
  }
  check(cudaGetLastError(), "k-means++ kernels");
  check(cudaDeviceSynchronize(), "k-means++");
}

}  // namespace kvlab::gpu
