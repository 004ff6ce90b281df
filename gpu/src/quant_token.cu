// Plain per-token format (axis=token): a group is G channels of one token.
//   codes (N, T, packed_bytes(D, bits)), scale/zero (N, T, ceil(D / G))
// Rows (tokens) are contiguous in the input and in the output, so one block takes TR whole
// rows: read once into a padded shared tile, min/max per (row, group) in channel order, codes
// packed with put_code into staged rows, staged rows written out as one contiguous run.
#include "tile.cuh"

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
  t.smem = (int64_t)rows * t.pitch * 4 + (int64_t)rows * f.groups * (int64_t)sizeof(GroupParams) + (int64_t)rows * t.sp;
  return t;
}

TokenTile choose_tile(const DevFormat& f) {
  int rows = (int)std::max<int64_t>(1, std::min<int64_t>(256, 16384 / f.D));
  while (rows > 1 && token_tile(f, rows).smem > kMaxTileSmem) rows /= 2;
  return token_tile(f, rows);
}

template <class In>
__global__ void __launch_bounds__(256) token_quant_tile(const In* __restrict__ x, DevFormat f, DevQuant q, TokenTile tt) {
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

__global__ void __launch_bounds__(256) token_dequant(DevFormat f, DevQuant q, void* __restrict__ out, OutType o, int TR) {
  extern __shared__ __align__(16) uint8_t smem[];
  const int D = (int)f.D, bits = f.bits, rb = (int)f.row_bytes;
  const int64_t r0 = (int64_t)blockIdx.x * TR;
  const int rows = (int)min((int64_t)TR, f.N * f.T - r0);
  const int sp = stage_pitch(rb);
  copy_rows(smem, sp, q.codes + r0 * rb, rb, rows, rb);
  __syncthreads();
  if (blockDim.x % D == 0) {  // v2: fixed channel (so fixed group) per thread, rows step
    const int c = threadIdx.x % D, step = blockDim.x / D, g = c / f.G;
    for (int r = threadIdx.x / D; r < rows; r += step) {
      const uint32_t code = get_code(smem + r * sp, c, bits);
      const int64_t pi = (r0 + r) * f.groups + g;
      const GroupParams p{load_param(q.scale, pi, f.half_params), f.sym ? 0.0f : load_param(q.zero, pi, f.half_params)};
      store_out(out, (r0 + r) * D + c, dequant_of(code, p, bits, f.sym), code, o);
    }
    return;
  }
  for (int i = threadIdx.x; i < rows * D; i += blockDim.x) {
    const int r = i / D, c = i - r * D;
    const uint32_t code = get_code(smem + r * sp, c, bits);
    const int64_t pi = (r0 + r) * f.groups + c / f.G;
    const GroupParams p{load_param(q.scale, pi, f.half_params), f.sym ? 0.0f : load_param(q.zero, pi, f.half_params)};
    store_out(out, (r0 + r) * D + c, dequant_of(code, p, bits, f.sym), code, o);
  }
}


// ---- v3: one warp per token row (D == 32 * V): lane l holds channels [V*l, V*l + V) in
// registers (one 8/16-byte load), min/max of each group by xor shuffles inside the G/V lanes
// of the group (f_min/f_max are a total order, so the order does not change a bit), codes
// packed in registers and stored as whole bytes/words. R rows per warp are loaded before use.
template <int V>
struct Vec;
template <>
struct Vec<4> {
  static __device__ __forceinline__ void load(const uint16_t* p, float v[4]) {
    const uint2 r = __ldcs(reinterpret_cast<const uint2*>(p));
    v[0] = half_to_float((uint16_t)(r.x & 0xffffu)), v[1] = half_to_float((uint16_t)(r.x >> 16));
    v[2] = half_to_float((uint16_t)(r.y & 0xffffu)), v[3] = half_to_float((uint16_t)(r.y >> 16));
  }
  static __device__ __forceinline__ void load(const float* p, float v[4]) {
    const float4 r = __ldcs(reinterpret_cast<const float4*>(p));
    v[0] = r.x, v[1] = r.y, v[2] = r.z, v[3] = r.w;
  }
};

// Store `bits * V / 8` bytes of packed codes (1, 2 or 4 bytes).
__device__ __forceinline__ void store_packed(uint8_t* p, uint32_t w, int nbytes) {
  if (nbytes == 4) *reinterpret_cast<uint32_t*>(p) = w;
  else if (nbytes == 2) *reinterpret_cast<uint16_t*>(p) = (uint16_t)w;
  else *p = (uint8_t)w;
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
      kmn = min(kmn, kj), kmx = max(kmx, kj);
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
__global__ void __launch_bounds__(256) token_dequant_warp(DevFormat f, DevQuant q, void* __restrict__ out, OutType o) {
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
    p[r] = GroupParams{load_param(q.scale, pi, f.half_params), f.sym ? 0.0f : load_param(q.zero, pi, f.half_params)};
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (r0 + r >= total) break;
    uint32_t c[V];
    float y[V];
#pragma unroll
    for (int j = 0; j < V; ++j) c[j] = word_code(w[r], j, bits), y[j] = dequant_of(c[j], p[r], bits, f.sym);
    const int64_t e = (r0 + r) * D + lane * V;
    store_out4(out, e, y, c, o);
  }
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
const char* quantize_token_t(const DevFormat& f, const In* x, DevQuant q, cudaStream_t s) {
  if (token_warp_ok(f, x, (int)sizeof(In))) {
    constexpr int R = 4;
    const int64_t warps = cdiv(f.N * f.T, R);
    token_quant_warp<In, 4, R><<<(unsigned)cdiv(warps, 8), 256, 0, s>>>(x, f, q);
    check_launch("token_quant_warp");
    return "warp";
  }
  const TokenTile tt = choose_tile(f);
  if (tt.smem > kMaxTileSmem) throw std::runtime_error("kvlab-gpu: per-token tile of one row does not fit shared memory");
  cudaFuncSetAttribute(token_quant_tile<In>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)tt.smem);
  token_quant_tile<In><<<(unsigned)cdiv(f.N * f.T, tt.rows), 256, tt.smem, s>>>(x, f, q, tt);
  check_launch("token_quant_tile");
  return "tile";
}

}  // namespace

const char* quantize_token(const DevFormat& f, const void* x, InType in, DevQuant q, cudaStream_t s) {
  if (in == InType::F16) return quantize_token_t(f, static_cast<const uint16_t*>(x), q, s);
  return quantize_token_t(f, static_cast<const float*>(x), q, s);
}

const char* dequantize_token(const DevFormat& f, DevQuant q, void* out, OutType o, cudaStream_t s) {
  if (token_warp_ok(f, nullptr, 1)) {
    constexpr int R = 4;
    const int64_t warps = cdiv(f.N * f.T, R);
    token_dequant_warp<4, R><<<(unsigned)cdiv(warps, 8), 256, 0, s>>>(f, q, out, o);
    check_launch("token_dequant_warp");
    return "warp";
  }
  const int TR = (int)std::max<int64_t>(1, std::min<int64_t>(256, 16384 / f.D));
  const int smem = TR * stage_pitch(f.row_bytes);
  if (smem > 48 * 1024) cudaFuncSetAttribute(token_dequant, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  token_dequant<<<(unsigned)cdiv(f.N * f.T, TR), 256, smem, s>>>(f, q, out, o, TR);
  check_launch("token_dequant");
  return "tile";
}

}  // namespace kvlab::gpu
