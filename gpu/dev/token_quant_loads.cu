// Per-token quantize: elements per lane (V = 16 or 32) and the load flavour (streaming
// __ldcs or L1-allocating __ldg) of gpu/src/quant_token.cu's token_quant_regs. Production
// keeps __ldg with V = 32 for fp16 input and V = 16 for fp32 (regs-32 / regs-16 in the
// tables); this file keeps the shapes they beat.
//
// A row of D channels is split over LPR = D/V lanes; per-row work (xor-shuffle min/max over the
// G/V lanes of a group, params, RN(1/s)) is shared by V elements; codes via fastq.cuh.
//
// Kernels (numbers for --bench; history from docs/PERFORMANCE.md, H200, runs 5-8):
//   1. V = 16, __ldcs (run 5, the first register kernel; former preset v4-alt for both inputs):
//      token f16 68-89% of copy, f32 95-98%.
//   2. V = 32, __ldcs (run 6-7): f16 81-90%, f32 72-74%: a lane's 16-byte pieces at 64-byte
//      stride use half of each 32-byte sector per instruction and __ldcs refetches the other
//      half from L2 (ncu: L1 86%, L2 88%).
//   3. V = 16, __ldg (run 8, production for fp32 input): f32 96-97%.
//   4. V = 32, __ldg (run 8, production for fp16 input): f16 86-97%; L1 keeps the sector for
//      the lane's next piece.
// Build: target kvlab_gpu_dev_token_quant_loads. Run: build/gpu/dev/token_quant_loads
// [--validate] [--bench]; --validate exits 1 on any byte that differs from core's quantize.
#include "dev_common.cuh"

namespace kvlab::gpu::dev {

// ---- The kernel as production had it when the choice was made (ldg at run time).

__device__ __forceinline__ float vmin(float a, float b) { return fminf(a, b); }
__device__ __forceinline__ float vmax(float a, float b) { return fmaxf(a, b); }
__device__ __forceinline__ __half2 vmin(__half2 a, __half2 b) { return __hmin2(a, b); }
__device__ __forceinline__ __half2 vmax(__half2 a, __half2 b) { return __hmax2(a, b); }
template <int W, class T>
__device__ __forceinline__ void tree_minmax(T* a, T* b) {
#pragma unroll
  for (int j = 0; j < W; ++j) {
    a[j] = vmin(a[j], a[j + W]);
    b[j] = vmax(b[j], b[j + W]);
  }
  if constexpr (W > 1) tree_minmax<W / 2>(a, b);
}

template <class In, int V, bool SYM, int BITS>
__global__ void __launch_bounds__(256)
    token_quant_loads(const In* __restrict__ x, DevFormat f, DevQuant q, int lpr_log2, int gl_log2, int mm,
                      int allow_fast, int ldg) {
  constexpr int R = (V == 16 && sizeof(In) == 2) ? 2 : 1, NQ = V * (int)sizeof(In) / 16, NW = V * BITS / 32;
  const int D = (int)f.D, RPW_LOG2 = 5 - lpr_log2;
  const int lane = threadIdx.x & 31, lr = lane & ((1 << lpr_log2) - 1), sub = lane >> lpr_log2;
  const int g = lr >> gl_log2, groups = (int)f.groups;
  const bool first = (lr & ((1 << gl_log2) - 1)) == 0;
  const int64_t total = f.N * f.T;
  const int64_t warps = (int64_t)gridDim.x * (blockDim.x >> 5);
  // Persistent: warp iteration ws takes rows [ws * R * RPW, (ws + 1) * R * RPW): R rows per lane.
  for (int64_t ws = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
       ((ws * R) << RPW_LOG2) < total; ws += warps) {
    const int64_t row0 = ((ws * R) << RPW_LOG2) + sub;
    uint4 raw[R][NQ];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int64_t row = row0 + ((int64_t)r << RPW_LOG2);
      const uint4* src = reinterpret_cast<const uint4*>(x + row * D + lr * V);
#pragma unroll
      for (int k = 0; k < NQ;
           ++k)  // a lane's 16-byte pieces share 32-byte sectors: __ldg lets L1 serve the second half
        raw[r][k] = row < total ? (ldg ? __ldg(src + k) : __ldcs(src + k)) : make_uint4(0u, 0u, 0u, 0u);
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int64_t row = row0 + ((int64_t)r << RPW_LOG2);
      float v[V];
#pragma unroll
      for (int k = 0; k < NQ; ++k) {
        const uint32_t u[4] = {raw[r][k].x, raw[r][k].y, raw[r][k].z, raw[r][k].w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if (sizeof(In) == 2) {
            v[k * 8 + 2 * e] = half_to_float((uint16_t)(u[e] & 0xffffu));
            v[k * 8 + 2 * e + 1] = half_to_float((uint16_t)(u[e] >> 16));
          } else {
            v[k * 4 + e] = __uint_as_float(u[e]);
          }
        }
      }
      float mn, mx;
      if (mm && sizeof(In) == 2) {  // fp16: HMNMX2 on the raw pairs (fastq.cuh: proven = total order)
        __half2 a[V / 2], b[V / 2];
#pragma unroll
        for (int k = 0; k < NQ; ++k) {
          const uint32_t u[4] = {raw[r][k].x, raw[r][k].y, raw[r][k].z, raw[r][k].w};
#pragma unroll
          for (int e = 0; e < 4; ++e) a[k * 4 + e] = b[k * 4 + e] = *reinterpret_cast<const __half2*>(&u[e]);
        }
        tree_minmax<V / 4>(a, b);
        mn = f_min(__low2float(a[0]), __high2float(a[0]));
        mx = f_max(__low2float(b[0]), __high2float(b[0]));
        for (int o = 1; o < (1 << gl_log2); o <<= 1) {
          mn = fminf(mn, __shfl_xor_sync(0xffffffffu, mn, o));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        }
      } else if (mm) {
        float a[V / 2], b[V / 2];
#pragma unroll
        for (int j = 0; j < V / 2; ++j) {
          a[j] = fminf(v[2 * j], v[2 * j + 1]);
          b[j] = fmaxf(v[2 * j], v[2 * j + 1]);
        }
        tree_minmax<V / 4>(a, b);
        mn = a[0];
        mx = b[0];
        for (int o = 1; o < (1 << gl_log2); o <<= 1) {
          mn = fminf(mn, __shfl_xor_sync(0xffffffffu, mn, o));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        }
      } else {
        int32_t kmn = ord_key(v[0]), kmx = kmn;
#pragma unroll
        for (int j = 1; j < V; ++j) {
          const int32_t kj = ord_key(v[j]);
          kmn = min(kmn, kj);
          kmx = max(kmx, kj);
        }
        for (int o = 1; o < (1 << gl_log2); o <<= 1) {
          kmn = min(kmn, __shfl_xor_sync(0xffffffffu, kmn, o));
          kmx = max(kmx, __shfl_xor_sync(0xffffffffu, kmx, o));
        }
        mn = key_float(kmn);
        mx = key_float(kmx);
      }
      const GroupParams p = params_of(mn, mx, BITS, SYM ? 1 : 0, f.half_params);
      if (row < total && first) write_params(q, row * groups + g, p, SYM ? 1 : 0, f.half_params);
      const QP qp = make_qp(p, allow_fast);
      uint32_t w[NW];
      pack_run<SYM, BITS, V>(v, qp, p, w);
      if (row < total) {
        uint8_t* dst = q.codes + row * f.row_bytes + lr * NW * 4;
#pragma unroll
        for (int k = 0; k < NW; k += 4) {  // 4, 8 or 16-byte stores
          if constexpr (NW == 1)
            *reinterpret_cast<uint32_t*>(dst) = w[0];
          else if constexpr (NW == 2)
            *reinterpret_cast<uint2*>(dst) = make_uint2(w[0], w[1]);
          else
            *reinterpret_cast<uint4*>(dst + 4 * k) = make_uint4(w[k], w[k + 1], w[k + 2], w[k + 3]);
        }
      }
    }
  }
}

// ---- Launcher: kernel number k (1-4) -> (V, ldg).

template <class In, int V>
void launch_v(const DevFormat& f, const In* x, DevQuant q, int ldg) {
  const int lpr_log2 = ilog2(f.D / V), gl_log2 = ilog2(f.G / V);
  const int R = (V == 16 && sizeof(In) == 2) ? 2 : 1;
  const int64_t warps = cdiv(f.N * f.T, (int64_t)R << (5 - lpr_log2));
  const int mm = 1;  // hardware min/max, the production arithmetic
  const int fd = 1;  // Markstein quotient, the production arithmetic
  auto go = [&](auto kern) {
    kern<<<persistent_grid(kern, 256, cdiv(warps, 8)), 256>>>(x, f, q, lpr_log2, gl_log2, mm, fd, ldg);
  };
  if (f.sym) {
    switch (f.bits) {
      case 2: go(token_quant_loads<In, V, true, 2>); break;
      case 4: go(token_quant_loads<In, V, true, 4>); break;
      default: go(token_quant_loads<In, V, true, 8>); break;
    }
  } else {
    switch (f.bits) {
      case 2: go(token_quant_loads<In, V, false, 2>); break;
      case 4: go(token_quant_loads<In, V, false, 4>); break;
      default: go(token_quant_loads<In, V, false, 8>); break;
    }
  }
  check_launch("token_quant_loads");
}

template <class In>
void run_kernel(int k, const DevFormat& f, const In* x, DevQuant q) {
  const int ldg = k >= 3 ? 1 : 0;
  if (k % 2 == 0)
    launch_v<In, 32>(f, x, q, ldg);
  else
    launch_v<In, 16>(f, x, q, ldg);
}

// Formats V = 32 takes with D = 128 (G a multiple of 32), 2/4/8 bits.
const char* kSpecs[] = {
    "scheme=asym,bits=2,axis=token,group=128,params=fp16",
    "scheme=asym,bits=4,axis=token,group=32,params=fp16",
    "scheme=asym,bits=8,axis=token,group=128,params=fp32",
    "scheme=sym,bits=8,axis=token,group=all,params=fp32",
};
constexpr int kKernels = 4;

// Launches kernel k on input x (fp16 or fp32).
const auto kRun = [](int k, const DevFormat& f, const auto* x, DevQuant q) { run_kernel(k, f, x, q); };

int64_t validate_all() {
  return validate_quantize({{2, 3, 300, 128}}, {std::begin(kSpecs), std::end(kSpecs)}, kKernels, 5, kRun);
}

void bench_all(const Options& o) {
  bench_quantize(o, {std::begin(kSpecs), std::end(kSpecs)}, kKernels, kRun);
}

}  // namespace kvlab::gpu::dev

int main(int argc, char** argv) {
  using namespace kvlab::gpu::dev;
  return run_main(argc, argv, "per-token quantize: 16 or 32 elements per lane, __ldcs or __ldg loads",
                  validate_all, bench_all);
}
