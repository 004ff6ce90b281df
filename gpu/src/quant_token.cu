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

template <class In>
const char* quantize_token_t(const DevFormat& f, const In* x, DevQuant q, cudaStream_t s) {
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
  const int TR = (int)std::max<int64_t>(1, std::min<int64_t>(256, 16384 / f.D));
  const int smem = TR * stage_pitch(f.row_bytes);
  if (smem > 48 * 1024) cudaFuncSetAttribute(token_dequant, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  token_dequant<<<(unsigned)cdiv(f.N * f.T, TR), 256, smem, s>>>(f, q, out, o, TR);
  check_launch("token_dequant");
  return "tile";
}

}  // namespace kvlab::gpu
