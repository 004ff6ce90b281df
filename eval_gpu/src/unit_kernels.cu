// Row kernels of the CUDA attention unit: one block per query row, fp64 throughout.
#include <math_constants.h>

#include <climits>

#include "unit_kernels.h"

namespace kvlab::gpu_eval {

namespace {

constexpr int kThreads = 256, kWarps = kThreads / 32;

// Top-k under the CPU's total order (topk.h): larger value first, then the earlier key.
struct Top {
  double v[kTop];
  int i[kTop];
};
__device__ bool before(double v, int i, double w, int j) { return v > w || (v == w && i < j); }
__device__ void top_init(Top& t) {
#pragma unroll
  for (int k = 0; k < kTop; ++k) {
    t.v[k] = -CUDART_INF;
    t.i[k] = INT_MAX;
  }
}
// Unrolled insertion: the arrays stay in registers.
__device__ void top_push(Top& t, double v, int i) {
  if (!before(v, i, t.v[kTop - 1], t.i[kTop - 1])) return;
  t.v[kTop - 1] = v;
  t.i[kTop - 1] = i;
#pragma unroll
  for (int k = kTop - 1; k > 0; --k)
    if (before(t.v[k], t.i[k], t.v[k - 1], t.i[k - 1])) {
      const double tv = t.v[k];
      t.v[k] = t.v[k - 1];
      t.v[k - 1] = tv;
      const int ti = t.i[k];
      t.i[k] = t.i[k - 1];
      t.i[k - 1] = ti;
    }
}

// The block's top-k indices into out (-1 where fewer keys exist), from every thread's list:
// k rounds, each taking the best head of all lists.
__device__ void top_merge(Top& t, int* out) {
  __shared__ double sv[kWarps];
  __shared__ int si[kWarps];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int k = 0; k < kTop; ++k) {
    double v = t.v[0];
    int i = t.i[0];
    for (int o = 16; o > 0; o /= 2) {
      const double w = __shfl_xor_sync(0xffffffffu, v, o);
      const int j = __shfl_xor_sync(0xffffffffu, i, o);
      if (before(w, j, v, i)) v = w, i = j;
    }
    if (lane == 0) sv[warp] = v, si[warp] = i;
    __syncthreads();
    v = sv[0];
    i = si[0];
    for (int w = 1; w < kWarps; ++w)
      if (before(sv[w], si[w], v, i)) v = sv[w], i = si[w];
    __syncthreads();
    if (threadIdx.x == 0) out[k] = v == -CUDART_INF ? -1 : i;
    if (t.i[0] == i && v != -CUDART_INF) {  // the winner pops its head
#pragma unroll
      for (int q = 0; q < kTop - 1; ++q) t.v[q] = t.v[q + 1], t.i[q] = t.i[q + 1];
      t.v[kTop - 1] = -CUDART_INF;
      t.i[kTop - 1] = INT_MAX;
    }
  }
}

// Online (max, sum of exp(x - max)) of one value.
__device__ void online_add(double& m, double& z, double x) {
  if (x > m) {
    z = z * exp(m - x) + 1.0;
    m = x;
  } else {
    z += exp(x - m);
  }
}

// Block-wide (max, sum) of every thread's (m, z); every thread gets the result.
__device__ void block_softmax_norm(double& m, double& z) {
  __shared__ double sm[kWarps], sz[kWarps];
  auto combine = [](double& m1, double& z1, double m2, double z2) {
    const double mx = fmax(m1, m2);
    if (mx == -CUDART_INF) return;
    z1 = (m1 == -CUDART_INF ? 0.0 : z1 * exp(m1 - mx)) + (m2 == -CUDART_INF ? 0.0 : z2 * exp(m2 - mx));
    m1 = mx;
  };
  for (int o = 16; o > 0; o /= 2) {
    const double m2 = __shfl_xor_sync(0xffffffffu, m, o), z2 = __shfl_xor_sync(0xffffffffu, z, o);
    combine(m, z, m2, z2);
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) sm[warp] = m, sz[warp] = z;
  __syncthreads();
  m = sm[0];
  z = sz[0];
  for (int w = 1; w < kWarps; ++w) combine(m, z, sm[w], sz[w]);
  __syncthreads();
}

// Block-wide sum, in a fixed order (the result does not depend on timing); every thread gets it.
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

__global__ void to_f64_kernel(const float* src, double* dst, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    dst[i] = src[i];
}

__global__ void stack_kernel(const float* q, int64_t heads, int64_t N, int64_t first, int64_t n, int64_t D,
                             double* dst) {
  const int64_t total = n * heads * D;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t d = e % D, r = e / D, h = r % heads, i = r / heads;
    dst[e] = q[(h * N + first + i) * D + d];
  }
}

__global__ void reference_kernel(const double* S, double* P, int64_t ld, int64_t nk, const int32_t* vis,
                                 double* mo, double* lzo, int32_t* topo) {
  const int64_t r = blockIdx.x;
  const double* s = S + r * ld;
  double* p = P + r * ld;
  const int n = vis[r];
  double m = -CUDART_INF, z = 0;
  Top t;
  top_init(t);
  for (int j = threadIdx.x; j < n; j += kThreads) {
    const double x = s[j];
    online_add(m, z, x);
    top_push(t, x, j);
  }
  block_softmax_norm(m, z);
  __shared__ int top[kTop];
  top_merge(t, top);
  const double lz = log(z);
  for (int64_t j = threadIdx.x; j < nk; j += kThreads) p[j] = j < n ? exp(s[j] - m - lz) : 0.0;
  if (threadIdx.x == 0) {
    mo[r] = m;
    lzo[r] = lz;
  }
  __syncthreads();
  if (threadIdx.x < kTop) topo[r * kTop + threadIdx.x] = top[threadIdx.x];
}

__global__ void method_kernel(const double* S, double* H, int64_t ld, int64_t nk, const int32_t* vis,
                              const double* mo, const double* lzo, const int32_t* topo, double* out) {
  const int64_t r = blockIdx.x;
  const double* s = S + r * ld;
  double* h = H + r * ld;
  const int n = vis[r];
  // The method's logits l_hat = l - delta: their max, normalizer and top-k.
  double mh = -CUDART_INF, zh = 0;
  Top t;
  top_init(t);
  for (int j = threadIdx.x; j < n; j += kThreads) {
    const double x = s[j] - h[j];
    online_add(mh, zh, x);
    top_push(t, x, j);
  }
  block_softmax_norm(mh, zh);
  __shared__ int top[kTop];
  top_merge(t, top);
  const double m = mo[r], lz = lzo[r], lzh = log(zh);
  // log P - log P_hat = delta + c on every key of the row.
  const double c = (mh - m) + (lzh - lz);
  double sq = 0, kl = 0;
  for (int64_t j = threadIdx.x; j < nk; j += kThreads) {
    double ph = 0;
    if (j < n) {
      const double x = s[j], d = h[j];
      const double p = exp(x - m - lz);
      ph = exp(x - d - mh - lzh);
      sq += (p - ph) * (p - ph);
      kl += p * (d + c);
    }
    h[j] = ph;
  }
  sq = block_sum(sq);
  kl = block_sum(kl);
  if (threadIdx.x == 0) {
    int shared = 0, count = 0;
    for (int a = 0; a < kTop; ++a) {
      count += topo[r * kTop + a] >= 0;
      for (int b = 0; b < kTop; ++b) shared += top[a] >= 0 && top[a] == topo[r * kTop + b];
    }
    out[r * 3 + 0] = sq;
    out[r * 3 + 1] = kl;
    out[r * 3 + 2] = (double)shared / (double)count;
  }
}

// One warp per row.
__global__ void output_kernel(const double* O, const double* Oh, int64_t rows, int64_t D, double* out) {
  const int64_t r = blockIdx.x * (int64_t)(blockDim.x / 32) + threadIdx.x / 32;
  if (r >= rows) return;
  const int lane = threadIdx.x % 32;
  double x = 0;
  for (int64_t d = lane; d < D; d += 32) {
    const double v = Oh ? O[r * D + d] - Oh[r * D + d] : O[r * D + d];
    x += v * v;
  }
  for (int o = 16; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
  if (lane == 0) out[r] = x;
}

int grid_for(int64_t n) {
  return (int)((n + kThreads - 1) / kThreads < 65535 ? (n + kThreads - 1) / kThreads : 65535);
}

}  // namespace

void to_f64(const float* src, double* dst, int64_t n, cudaStream_t s) {
  if (n > 0) to_f64_kernel<<<grid_for(n), kThreads, 0, s>>>(src, dst, n);
}

void stack_queries(const float* q, int64_t heads, int64_t N, int64_t first, int64_t n, int64_t D, double* dst,
                   cudaStream_t s) {
  if (n > 0) stack_kernel<<<grid_for(n * heads * D), kThreads, 0, s>>>(q, heads, N, first, n, D, dst);
}

void reference_rows(const double* S, double* P, int64_t ld, int64_t nk, const int32_t* vis, int64_t rows,
                    double* m, double* logz, int32_t* top, cudaStream_t s) {
  if (rows > 0) reference_kernel<<<(unsigned)rows, kThreads, 0, s>>>(S, P, ld, nk, vis, m, logz, top);
}

void method_rows(const double* S, double* H, int64_t ld, int64_t nk, const int32_t* vis, int64_t rows,
                 const double* m, const double* logz, const int32_t* top, double* out, cudaStream_t s) {
  if (rows > 0) method_kernel<<<(unsigned)rows, kThreads, 0, s>>>(S, H, ld, nk, vis, m, logz, top, out);
}

void output_rows(const double* O, const double* Oh, int64_t rows, int64_t D, double* out, cudaStream_t s) {
  if (rows > 0)
    output_kernel<<<(unsigned)((rows + kWarps - 1) / kWarps), kThreads, 0, s>>>(O, Oh, rows, D, out);
}

}  // namespace kvlab::gpu_eval
