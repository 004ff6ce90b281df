// Plain per-token format (axis=token): a group is G channels of one token.
//   codes (N, T, packed_bytes(D, bits)), scale/zero (N, T, ceil(D / G))
// Kernel paths, first that fits (the label each returns in brackets):
//   quantize:   token_quant_regs, 32 or 16 elements per lane [regs-32, regs-16];
//               token_quant_warp [warp]; token_quant_tile [tile]
//   dequantize: token_dequant_regs [regs]; token_dequant_warp [warp]; token_dequant [tile]
// The tile kernels take TR whole rows per block (rows are contiguous in the input and the
// output): read once into a padded shared tile, min/max per (row, group) in channel order,
// codes packed with put_code into staged rows, written out as one contiguous run.
#include "fastq.cuh"

namespace kvlab::gpu {
namespace {

struct TokenTile {
  int rows;      // TR: token rows per block
  int pitch;     // floats per tile row (odd, against bank conflicts)
  int sp;        // staged bytes per output row
  int64_t smem;  // dynamic shared memory
};

TokenTile token_tile(const DevFormat& f, int rows) {
  TokenTile t{};
  t.rows = rows;
  t.pitch = (int)(f.D | 1);
  t.sp = stage_pitch(f.row_bytes);
  t.smem = (int64_t)rows * t.pitch * 4 + (int64_t)rows * f.groups * (int64_t)sizeof(GroupParams) +
           (int64_t)rows * t.sp;
  return t;
}

TokenTile choose_tile(const DevFormat& f) {
  int rows = (int)std::max<int64_t>(1, std::min<int64_t>(256, 16384 / f.D));
  while (rows > 1 && token_tile(f, rows).smem > kMaxTileSmem) rows /= 2;
  return token_tile(f, rows);
}

template <class In>
__global__ void __launch_bounds__(256)
    token_quant_tile(const In* __restrict__ x, DevFormat f, DevQuant q, TokenTile tt) {
  extern __shared__ __align__(16) uint8_t smem[];
  const int D = (int)f.D, G = f.G, bits = f.bits, groups = (int)f.groups;
  const int64_t total_rows = f.N * f.T, r0 = (int64_t)blockIdx.x * tt.rows;
  const int rows = (int)min((int64_t)tt.rows, total_rows - r0);
  float* tile = reinterpret_cast<float*>(smem);
  GroupParams* par = reinterpret_cast<GroupParams*>(tile + tt.rows * tt.pitch);
  uint8_t* stage = reinterpret_cast<uint8_t*>(par + tt.rows * groups);

  load_tile(tile, tt.pitch, x + r0 * D, rows, D);
  __syncthreads();
  for (int i = threadIdx.x; i < rows * groups; i += blockDim.x) {
    const int g = i / rows, r = i - g * rows;
    const float* v = tile + r * tt.pitch;
    float mn = INFINITY, mx = -INFINITY;
    for (int c = g * G; c < min(D, g * G + G); ++c) {  // channel order, as the CPU reference
      mn = f_min(mn, v[c]);
      mx = f_max(mx, v[c]);
    }
    const GroupParams p = params_of(mn, mx, bits, f.sym, f.half_params);
    par[r * groups + g] = p;
    write_params(q, (r0 + r) * groups + g, p, f.sym, f.half_params);
  }
  __syncthreads();
  // Codes: item (segment of 8 channels = `bits` whole bytes, row), row fastest.
  const int segs = (D + 7) / 8, rb = (int)f.row_bytes;
  for (int i = threadIdx.x; i < rows * segs; i += blockDim.x) {
    const int s = i / rows, r = i - s * rows;
    uint8_t* row = stage + r * tt.sp;
    for (int b = s * bits; b < min(s * bits + bits, rb); ++b) row[b] = 0;
    const float* v = tile + r * tt.pitch;
    for (int j = 0; j < 8; ++j) {
      const int c = 8 * s + j;
      if (c < D) put_code(row, c, bits, code_of(v[c], par[r * groups + c / G], bits, f.sym));
    }
  }
  __syncthreads();
  copy_rows(q.codes + r0 * rb, rb, stage, tt.sp, rows, rb);
}

__global__ void __launch_bounds__(256)
    token_dequant(DevFormat f, DevQuant q, void* __restrict__ out, OutType o, int TR) {
  extern __shared__ __align__(16) uint8_t smem[];
  const int D = (int)f.D, bits = f.bits, rb = (int)f.row_bytes;
  const int64_t r0 = (int64_t)blockIdx.x * TR;
  const int rows = (int)min((int64_t)TR, f.N * f.T - r0);
  const int sp = stage_pitch(rb);
  copy_rows(smem, sp, q.codes + r0 * rb, rb, rows, rb);
  __syncthreads();
  if (blockDim.x % D == 0) {  // fixed channel (so fixed group) per thread, rows step
    const int c = threadIdx.x % D, step = blockDim.x / D, g = c / f.G;
    for (int r = threadIdx.x / D; r < rows; r += step) {
      const uint32_t code = get_code(smem + r * sp, c, bits);
      const int64_t pi = (r0 + r) * f.groups + g;
      const GroupParams p{load_param(q.scale, pi, f.half_params),
                          f.sym ? 0.0f : load_param(q.zero, pi, f.half_params)};
      store_out(out, (r0 + r) * D + c, dequant_of(code, p, bits, f.sym), code, o);
    }
    return;
  }
  for (int i = threadIdx.x; i < rows * D; i += blockDim.x) {
    const int r = i / D, c = i - r * D;
    const uint32_t code = get_code(smem + r * sp, c, bits);
    const int64_t pi = (r0 + r) * f.groups + c / f.G;
    const GroupParams p{load_param(q.scale, pi, f.half_params),
                        f.sym ? 0.0f : load_param(q.zero, pi, f.half_params)};
    store_out(out, (r0 + r) * D + c, dequant_of(code, p, bits, f.sym), code, o);
  }
}

// ---- Warp kernels: one warp per token row (D == 32 * V): lane l holds channels [V*l, V*l + V) in
// registers (one 8/16-byte load), min/max of each group by xor shuffles inside the G/V lanes
// of the group (f_min/f_max are a total order, so the order does not change a bit), codes
// packed in registers and stored as whole bytes/words. R rows per warp are loaded before use.
template <int V>
struct Vec;
template <>
struct Vec<4> {
  static __device__ __forceinline__ void load(const uint16_t* p, float v[4]) {
    const uint2 r = __ldcs(reinterpret_cast<const uint2*>(p));
    v[0] = half_to_float((uint16_t)(r.x & 0xffffu));
    v[1] = half_to_float((uint16_t)(r.x >> 16));
    v[2] = half_to_float((uint16_t)(r.y & 0xffffu));
    v[3] = half_to_float((uint16_t)(r.y >> 16));
  }
  static __device__ __forceinline__ void load(const float* p, float v[4]) {
    const float4 r = __ldcs(reinterpret_cast<const float4*>(p));
    v[0] = r.x;
    v[1] = r.y;
    v[2] = r.z;
    v[3] = r.w;
  }
};

// Store `bits * V / 8` bytes of packed codes (1, 2 or 4 bytes).
__device__ __forceinline__ void store_packed(uint8_t* p, uint32_t w, int nbytes) {
  if (nbytes == 4)
    *reinterpret_cast<uint32_t*>(p) = w;
  else if (nbytes == 2)
    *reinterpret_cast<uint16_t*>(p) = (uint16_t)w;
  else
    *p = (uint8_t)w;
}
__device__ __forceinline__ uint32_t load_packed(const uint8_t* p, int nbytes) {
  if (nbytes == 4) return __ldg(reinterpret_cast<const uint32_t*>(p));
  if (nbytes == 2) return __ldg(reinterpret_cast<const uint16_t*>(p));
  return __ldg(p);
}

template <class In, int V, int R>
__global__ void __launch_bounds__(256) token_quant_warp(const In* __restrict__ x, DevFormat f, DevQuant q) {
  const int lane = threadIdx.x & 31, bits = f.bits, D = 32 * V;
  const int gl = f.G / V;  // lanes per group (power of two, 1..32)
  const int g = lane / gl, groups = (int)f.groups;
  const int nbytes = V * bits / 8;
  const int64_t total = f.N * f.T;
  const int64_t r0 = ((int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)) * R;
  float v[R][V];
#pragma unroll
  for (int r = 0; r < R; ++r)
    if (r0 + r < total) Vec<V>::load(x + (r0 + r) * D + lane * V, v[r]);
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (r0 + r >= total) break;
    int32_t kmn = ord_key(v[r][0]), kmx = kmn;
#pragma unroll
    for (int j = 1; j < V; ++j) {
      const int32_t kj = ord_key(v[r][j]);
      kmn = min(kmn, kj);
      kmx = max(kmx, kj);
    }
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      if (o >= gl) break;
      kmn = min(kmn, __shfl_xor_sync(0xffffffffu, kmn, o));
      kmx = max(kmx, __shfl_xor_sync(0xffffffffu, kmx, o));
    }
    const GroupParams p = params_of(key_float(kmn), key_float(kmx), bits, f.sym, f.half_params);
    if ((lane & (gl - 1)) == 0) write_params(q, (r0 + r) * groups + g, p, f.sym, f.half_params);
    uint32_t w = 0;
#pragma unroll
    for (int j = 0; j < V; ++j) w = pack_code_into(w, j, bits, code_of(v[r][j], p, bits, f.sym));
    store_packed(q.codes + (r0 + r) * f.row_bytes + lane * nbytes, w, nbytes);
  }
}

template <int V, int R>
__global__ void __launch_bounds__(256)
    token_dequant_warp(DevFormat f, DevQuant q, void* __restrict__ out, OutType o) {
  const int lane = threadIdx.x & 31, bits = f.bits, D = 32 * V;
  const int g = lane * V / f.G, groups = (int)f.groups;
  const int nbytes = V * bits / 8;
  const int64_t total = f.N * f.T;
  const int64_t r0 = ((int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)) * R;
  uint32_t w[R];
  GroupParams p[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (r0 + r >= total) break;
    w[r] = load_packed(q.codes + (r0 + r) * f.row_bytes + lane * nbytes, nbytes);
    const int64_t pi = (r0 + r) * groups + g;
    p[r] = GroupParams{load_param(q.scale, pi, f.half_params),
                       f.sym ? 0.0f : load_param(q.zero, pi, f.half_params)};
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (r0 + r >= total) break;
    uint32_t c[V];
    float y[V];
#pragma unroll
    for (int j = 0; j < V; ++j) {
      c[j] = word_code(w[r], j, bits);
      y[j] = dequant_of(c[j], p[r], bits, f.sym);
    }
    const int64_t e = (r0 + r) * D + lane * V;
    store_out4(out, e, y, c, o);
  }
}

// ---- Register kernels: 16 or 32 elements (V) per lane for quantize (LPR = D/V lanes per row, 32/LPR rows
// per warp), so the per-row work (shuffles, params_of, RN(1/s), write_params) is shared by V elements;
// persistent grid; codes through fastq.cuh (reciprocal + Markstein quotient, magic-number rounding, codes
// packed by adding biased floats). 8 (f16 out) or 4 (f32 out) elements per lane for
// dequantize: one 16-byte store per lane and row, codes converted without I2F.
// Pairwise min/max tree with compile-time strides (a runtime-stride loop left the arrays on
// the stack at V = 32).
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
__global__ void __launch_bounds__(256) token_quant_regs(const In* __restrict__ x, DevFormat f, DevQuant q,
                                                        int lpr_log2, int gl_log2, int mm, int allow_fast) {
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
      // A lane's 16-byte pieces share 32-byte sectors: __ldg lets L1 serve the second half
      // (streaming __ldcs loads: gpu/dev/token_quant_loads.cu).
      for (int k = 0; k < NQ; ++k) raw[r][k] = row < total ? __ldg(src + k) : make_uint4(0u, 0u, 0u, 0u);
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

template <int V, bool SYM, int BITS, bool F16OUT>
__global__ void __launch_bounds__(256) token_dequant_regs(DevFormat f, DevQuant q, void* __restrict__ out) {
  constexpr int R = 4, NB = V * BITS / 8;  // code bytes per lane and row (1..8)
  constexpr int NWD = NB > 4 ? NB / 4 : 1;
  const int D = (int)f.D, LPR = D / V, RPW = 32 / LPR;
  const int lane = threadIdx.x & 31, lr = lane & (LPR - 1), sub = lane / LPR;
  const int g = lr * V / f.G, groups = (int)f.groups;
  const int64_t total = f.N * f.T;
  const int64_t row0 = ((int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)) * RPW * R + sub;
  uint32_t w[R][NWD];
  float sc[R], ze[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int64_t row = row0 + (int64_t)r * RPW;
    if (row >= total) continue;
    const uint8_t* src = q.codes + row * f.row_bytes + lr * NB;
    if (NB == 8) {
      const uint2 t = __ldg(reinterpret_cast<const uint2*>(src));
      w[r][0] = t.x;
      w[r][NWD - 1] = t.y;
    } else if (NB == 4) {
      w[r][0] = __ldg(reinterpret_cast<const uint32_t*>(src));
    } else if (NB == 2) {
      w[r][0] = __ldg(reinterpret_cast<const uint16_t*>(src));
    } else {
      w[r][0] = __ldg(src);
    }
    const int64_t pi = row * groups + g;
    sc[r] = load_param(q.scale, pi, f.half_params);
    ze[r] = SYM ? 0.0f : load_param(q.zero, pi, f.half_params);
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int64_t row = row0 + (int64_t)r * RPW;
    if (row >= total) continue;
    float y[V];
#pragma unroll
    for (int j = 0; j < V; ++j)
      y[j] = dequant_word<SYM, BITS>(w[r][(j * BITS) / 32], j % (32 / BITS), sc[r], ze[r]);
    const int64_t e = row * D + lr * V;
    if (F16OUT) {
      static_assert(!F16OUT || V == 8, "f16 out: 8 per lane");
      *reinterpret_cast<uint4*>(static_cast<uint16_t*>(out) + e) =
          make_uint4(half2_bits(y[0], y[1]), half2_bits(y[2 % V], y[3 % V]), half2_bits(y[4 % V], y[5 % V]),
                     half2_bits(y[6 % V], y[7 % V]));
    } else {
      static_assert(F16OUT || V == 4, "f32 out: 4 per lane");
      *reinterpret_cast<float4*>(static_cast<float*>(out) + e) =
          make_float4(y[0], y[1 % V], y[2 % V], y[3 % V]);
    }
  }
}

bool pow2(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

// Register-kernel eligibility: lanes per row and per group powers of two, whole words of codes
// per lane.
bool token_regs_ok(const DevFormat& f, int V, const void* x, const KernelConfig& cfg) {
  if (!cfg.fast_kernels) return false;
  if (f.bits != 2 && f.bits != 4 && f.bits != 8) return false;
  if (f.D % V != 0 || !pow2(f.D / V) || f.D / V > 32) return false;
  if (f.G % V != 0 || !pow2(f.G / V) || f.G > f.D) return false;
  return x == nullptr || (reinterpret_cast<uintptr_t>(x) % 16) == 0;
}

template <class In, int V>
void launch_token_quant_regs_t(const DevFormat& f, const In* x, DevQuant q, cudaStream_t s,
                               const KernelConfig& cfg) {
  const int lpr_log2 = ilog2(f.D / V), gl_log2 = ilog2(f.G / V);
  const int R = (V == 16 && sizeof(In) == 2) ? 2 : 1;
  const int64_t warps = cdiv(f.N * f.T, (int64_t)R << (5 - lpr_log2));
  const int mm = cfg.hw_minmax ? 1 : 0;
  const int fd = cfg.fast_div ? 1 : 0;
  auto go = [&](auto kern) {
    kern<<<persistent_grid(kern, 256, cdiv(warps, 8)), 256, 0, s>>>(x, f, q, lpr_log2, gl_log2, mm, fd);
  };
  if (f.sym) {
    switch (f.bits) {
      case 2: go(token_quant_regs<In, V, true, 2>); break;
      case 4: go(token_quant_regs<In, V, true, 4>); break;
      default: go(token_quant_regs<In, V, true, 8>); break;
    }
  } else {
    switch (f.bits) {
      case 2: go(token_quant_regs<In, V, false, 2>); break;
      case 4: go(token_quant_regs<In, V, false, 4>); break;
      default: go(token_quant_regs<In, V, false, 8>); break;
    }
  }
  check_launch("token_quant_regs");
}

// fp16 input: V = 32 elements per lane where the groups allow it (per-row work over more
// elements; measured faster), else 16; fp32 input: 16 (32 measured slower: 64-byte lanes).
// gpu/dev/token_quant_loads.cu times the other choices. 0: no register kernel fits.
int token_quant_v(const DevFormat& f, int elem, const void* x, const KernelConfig& cfg) {
  if (elem == 2 && token_regs_ok(f, 32, x, cfg)) return 32;
  return token_regs_ok(f, 16, x, cfg) ? 16 : 0;
}
// The label of the kernel that ran, or nullptr when no register kernel fits.
template <class In>
const char* launch_token_quant_regs(const DevFormat& f, const In* x, DevQuant q, cudaStream_t s,
                                    const KernelConfig& cfg) {
  switch (token_quant_v(f, (int)sizeof(In), x, cfg)) {
    case 32: launch_token_quant_regs_t<In, 32>(f, x, q, s, cfg); return "regs-32";
    case 16: launch_token_quant_regs_t<In, 16>(f, x, q, s, cfg); return "regs-16";
    default: return nullptr;
  }
}

template <int V, bool F16OUT>
void launch_token_dequant_regs(const DevFormat& f, DevQuant q, void* out, cudaStream_t s) {
  const int RPW = 32 / (int)(f.D / V);
  const int64_t warps = cdiv(f.N * f.T, (int64_t)RPW * 4);
  const unsigned grid = (unsigned)cdiv(warps, 8);
  auto go = [&](auto kern) { kern<<<grid, 256, 0, s>>>(f, q, out); };
  if (f.sym) {
    switch (f.bits) {
      case 2: go(token_dequant_regs<V, true, 2, F16OUT>); break;
      case 4: go(token_dequant_regs<V, true, 4, F16OUT>); break;
      default: go(token_dequant_regs<V, true, 8, F16OUT>); break;
    }
  } else {
    switch (f.bits) {
      case 2: go(token_dequant_regs<V, false, 2, F16OUT>); break;
      case 4: go(token_dequant_regs<V, false, 4, F16OUT>); break;
      default: go(token_dequant_regs<V, false, 8, F16OUT>); break;
    }
  }
  check_launch("token_dequant_regs");
}

bool token_warp_ok(const DevFormat& f, const void* x, int elem) {
  const int V = 4;
  if (f.D != 32 * V || f.G % V != 0 || f.G > f.D) return false;
  const int gl = f.G / V;
  if (gl & (gl - 1)) return false;
  if ((V * f.bits) % 8 != 0) return false;
  return x == nullptr || (reinterpret_cast<uintptr_t>(x) % (V * elem)) == 0;
}

template <class In>
const char* quantize_token_t(const DevFormat& f, const In* x, DevQuant q, cudaStream_t s,
                             const KernelConfig& cfg) {
  if (const char* label = launch_token_quant_regs<In>(f, x, q, s, cfg)) return label;
  if (token_warp_ok(f, x, (int)sizeof(In))) {
    constexpr int R = 4;
    const int64_t warps = cdiv(f.N * f.T, R);
    token_quant_warp<In, 4, R><<<(unsigned)cdiv(warps, 8), 256, 0, s>>>(x, f, q);
    check_launch("token_quant_warp");
    return "warp";
  }
  const TokenTile tt = choose_tile(f);
  if (tt.smem > kMaxTileSmem)
    throw std::runtime_error("kvlab-gpu: per-token tile of one row does not fit shared memory");
  cudaFuncSetAttribute(token_quant_tile<In>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)tt.smem);
  token_quant_tile<In><<<(unsigned)cdiv(f.N * f.T, tt.rows), 256, tt.smem, s>>>(x, f, q, tt);
  check_launch("token_quant_tile");
  return "tile";
}

}  // namespace

const char* quantize_token(const DevFormat& f, const void* x, InType in, DevQuant q, cudaStream_t s,
                           const KernelConfig& cfg) {
  if (in == InType::F16) return quantize_token_t(f, static_cast<const uint16_t*>(x), q, s, cfg);
  return quantize_token_t(f, static_cast<const float*>(x), q, s, cfg);
}

const char* dequantize_token(const DevFormat& f, DevQuant q, void* out, OutType o, cudaStream_t s,
                             const KernelConfig& cfg) {
  if (o == OutType::F16 && token_regs_ok(f, 8, nullptr, cfg)) {
    launch_token_dequant_regs<8, true>(f, q, out, s);
    return "regs";
  }
  if (o == OutType::F32 && token_regs_ok(f, 4, nullptr, cfg)) {
    launch_token_dequant_regs<4, false>(f, q, out, s);
    return "regs";
  }
  if (token_warp_ok(f, nullptr, 1)) {
    constexpr int R = 4;
    const int64_t warps = cdiv(f.N * f.T, R);
    token_dequant_warp<4, R><<<(unsigned)cdiv(warps, 8), 256, 0, s>>>(f, q, out, o);
    check_launch("token_dequant_warp");
    return "warp";
  }
  const int TR = (int)std::max<int64_t>(1, std::min<int64_t>(256, 16384 / f.D));
  const int smem = TR * stage_pitch(f.row_bytes);
  if (smem > 48 * 1024)
    cudaFuncSetAttribute(token_dequant, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  token_dequant<<<(unsigned)cdiv(f.N * f.T, TR), 256, smem, s>>>(f, q, out, o, TR);
  check_launch("token_dequant");
  return "tile";
}

}  // namespace kvlab::gpu
