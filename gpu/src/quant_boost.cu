// Kitty key pages (axis=channel, boost): pages of G tokens, page-major.
//   low plane (N, P, D, packed_bytes(Gp, bits)), high plane (N, P, k, packed_bytes(Gp, 2)),
//   boost_index (N, P, D) uint8 (0xFF = not boosted), scale/zero (N, P, D)
// One block per page: the G x D tile is read once into shared memory; per channel, in token
// order, min, max and the fp32 sum of |x|; the top k channels by that sum (ties to the lower
// channel) get bits + 2 with slots in channel order; low and high codes are staged and written.
#include "tile.cuh"

namespace kvlab::gpu {
namespace {

struct BoostSmem {
  int spl, sph;
  int64_t bytes;
};

BoostSmem boost_smem(const DevFormat& f) {
  BoostSmem b{};
  b.spl = stage_pitch(packed_bytes(f.G, f.bits));
  b.sph = stage_pitch(packed_bytes(f.G, 2));
  b.bytes = (int64_t)f.G * f.D * 4 + f.D * (4 + 4 + (int64_t)sizeof(GroupParams)) + f.D * (int64_t)b.spl +
            (int64_t)std::max(f.k, 1) * b.sph;
  return b;
}

template <class In>
__global__ void __launch_bounds__(256) boost_quant_page(const In* __restrict__ x, DevFormat f, DevQuant q, BoostSmem bs) {
  extern __shared__ __align__(16) uint8_t smem[];
  const int D = (int)f.D, G = f.G, bits = f.bits, k = f.k;
  const int64_t n = blockIdx.x / f.groups, pg = blockIdx.x % f.groups, t0 = pg * G, w = blockIdx.x;
  const int len = (int)f.page_tokens(pg);
  const int nbl = (int)packed_bytes(len, bits), nbh = (int)packed_bytes(len, 2);
  float* tile = reinterpret_cast<float*>(smem);            // len x D
  float* score = tile + G * D;                              // D
  int* slot = reinterpret_cast<int*>(score + D);            // D: slot or -1
  GroupParams* par = reinterpret_cast<GroupParams*>(slot + D);
  uint8_t* low = reinterpret_cast<uint8_t*>(par + D);       // D rows of spl bytes
  uint8_t* high = low + D * bs.spl;                         // k rows of sph bytes

  load_tile(tile, D, x + (n * f.T + t0) * D, len, D);
  __syncthreads();
  for (int c = threadIdx.x; c < D; c += blockDim.x) {
    int32_t kmn = ord_key(INFINITY), kmx = ord_key(-INFINITY);
    float sum = 0.0f;
    for (int t = 0; t < len; ++t) {  // token order: fp32 sum as the CPU reference
      const float v = tile[t * D + c];
      const int32_t k = ord_key(v);  // min/max by order keys (tile.cuh): same element as f_min/f_max
      kmn = min(kmn, k), kmx = max(kmx, k);
      sum = f_add(sum, f_abs(v));
    }
    const float mn = key_float(kmn), mx = key_float(kmx);
    score[c] = sum;
    par[c] = GroupParams{mn, mx};  // raw min/max until the levels are known
  }
  __syncthreads();
  for (int c = threadIdx.x; c < D; c += blockDim.x) {
    const float sc = score[c];
    int rank = 0;
    for (int o = 0; o < D; ++o) rank += (score[o] > sc || (score[o] == sc && o < c)) ? 1 : 0;
    slot[c] = rank < k ? 1 : 0;
  }
  __syncthreads();
  for (int c = threadIdx.x; c < D; c += blockDim.x) {
    int before = 0;
    for (int o = 0; o < c; ++o) before += slot[o] > 0 ? 1 : 0;  // read-only pass over flags
    const bool boosted = slot[c] > 0;
    const int levels = asym_levels(boosted ? (bits + 2) /* spec.h boosted_bits: Kitty raises boosted channels by 2 bits */ : bits);
    const GroupParams p = KvlabRecipe::asym_params(par[c].scale, par[c].zero, levels, f.half_params != 0);
    q.index[w * D + c] = boosted ? (uint8_t)before : (uint8_t)0xFF;
    write_params(q, w * D + c, p, 0, f.half_params);
    score[c] = boosted ? (float)before : -1.0f;  // reuse as the slot, once every rank is read
    par[c] = p;  // own element only
  }
  __syncthreads();
  const uint32_t low_mask = (1u << bits) - 1u;
  const int segs = (len + 7) / 8;
  for (int i = threadIdx.x; i < segs * D; i += blockDim.x) {
    const int s = i / D, c = i - s * D;
    const int sl = (int)score[c];
    const bool boosted = sl >= 0;
    const int levels = asym_levels(boosted ? (bits + 2) /* spec.h boosted_bits: Kitty raises boosted channels by 2 bits */ : bits);
    uint8_t* lrow = low + c * bs.spl;
    uint8_t* hrow = boosted ? high + sl * bs.sph : nullptr;
    for (int b = s * bits; b < min(s * bits + bits, nbl); ++b) lrow[b] = 0;
    if (boosted)
      for (int b = s * 2; b < min(s * 2 + 2, nbh); ++b) hrow[b] = 0;
    const GroupParams p = par[c];
    for (int j = 0; j < 8; ++j) {
      const int t = 8 * s + j;
      if (t >= len) break;
      const uint32_t code = KvlabRecipe::asym_code(tile[t * D + c], p, levels);
      put_code(lrow, t, bits, code & low_mask);
      if (boosted) put_code(hrow, t, 2, code >> bits);
    }
  }
  __syncthreads();
  copy_rows(q.codes + n * f.slice_low() + pg * D * packed_bytes(G, bits), nbl, low, bs.spl, D, nbl);
  if (k > 0) copy_rows(q.high + n * f.slice_high() + pg * k * packed_bytes(G, 2), nbh, high, bs.sph, k, nbh);
}

__global__ void __launch_bounds__(256) boost_dequant_page(DevFormat f, DevQuant q, void* __restrict__ out, OutType o,
                                                          BoostSmem bs) {
  extern __shared__ __align__(16) uint8_t smem[];
  const int D = (int)f.D, G = f.G, bits = f.bits, k = f.k;
  const int64_t n = blockIdx.x / f.groups, pg = blockIdx.x % f.groups, t0 = pg * G, w = blockIdx.x;
  const int len = (int)f.page_tokens(pg);
  const int nbl = (int)packed_bytes(len, bits), nbh = (int)packed_bytes(len, 2);
  uint8_t* index = smem;                // D (padded to 16)
  uint8_t* low = smem + ((D + 15) / 16) * 16;
  uint8_t* high = low + D * bs.spl;
  for (int c = threadIdx.x; c < D; c += blockDim.x) index[c] = q.index[w * D + c];
  copy_rows(low, bs.spl, q.codes + n * f.slice_low() + pg * D * packed_bytes(G, bits), nbl, D, nbl);
  if (k > 0) copy_rows(high, bs.sph, q.high + n * f.slice_high() + pg * k * packed_bytes(G, 2), nbh, k, nbh);
  __syncthreads();
  if (blockDim.x % D == 0) {  // v2: fixed channel per thread, params and slot loaded once
    const int c = threadIdx.x % D, step = blockDim.x / D, sl = index[c];
    const uint8_t* lrow = low + c * bs.spl;
    const uint8_t* hrow = high + (sl == 0xFF ? 0 : sl) * bs.sph;
    const GroupParams p{load_param(q.scale, w * D + c, f.half_params), load_param(q.zero, w * D + c, f.half_params)};
    const int64_t obase = (n * f.T + t0) * D + c;
    for (int t = threadIdx.x / D; t < len; t += step) {
      uint32_t code = get_code(lrow, t, bits);
      if (sl != 0xFF) code |= get_code(hrow, t, 2) << bits;
      store_out(out, obase + (int64_t)t * D, KvlabRecipe::asym_dequant(code, p), code, o);
    }
    return;
  }
  for (int i = threadIdx.x; i < len * D; i += blockDim.x) {
    const int t = i / D, c = i - t * D;
    uint32_t code = get_code(low + c * bs.spl, t, bits);
    const int sl = index[c];
    if (sl != 0xFF) code |= get_code(high + sl * bs.sph, t, 2) << bits;
    const GroupParams p{load_param(q.scale, w * D + c, f.half_params), load_param(q.zero, w * D + c, f.half_params)};
    store_out(out, (n * f.T + t0 + t) * D + c, KvlabRecipe::asym_dequant(code, p), code, o);
  }
}

template <class In>
const char* quantize_boost_t(const DevFormat& f, const In* x, DevQuant q, cudaStream_t s) {
  const BoostSmem bs = boost_smem(f);
  if (bs.bytes > kMaxTileSmem)
    throw std::runtime_error("kvlab-gpu: boost page of " + std::to_string(f.G) + " x " + std::to_string(f.D) +
                             " does not fit shared memory; use a smaller page (group)");
  cudaFuncSetAttribute(boost_quant_page<In>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bs.bytes);
  boost_quant_page<In><<<(unsigned)(f.N * f.groups), 256, bs.bytes, s>>>(x, f, q, bs);
  check_launch("boost_quant_page");
  return "page";
}

}  // namespace

const char* quantize_boost(const DevFormat& f, const void* x, InType in, DevQuant q, cudaStream_t s) {
  if (in == InType::F16) return quantize_boost_t(f, static_cast<const uint16_t*>(x), q, s);
  return quantize_boost_t(f, static_cast<const float*>(x), q, s);
}

const char* dequantize_boost(const DevFormat& f, DevQuant q, void* out, OutType o, cudaStream_t s) {
  const BoostSmem bs = boost_smem(f);
  const int smem = (int)(((f.D + 15) / 16) * 16 + f.D * bs.spl + std::max(f.k, 1) * bs.sph);
  if (smem > 48 * 1024) cudaFuncSetAttribute(boost_dequant_page, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  boost_dequant_page<<<(unsigned)(f.N * f.groups), 256, smem, s>>>(f, q, out, o, bs);
  check_launch("boost_dequant_page");
  return "page";
}

}  // namespace kvlab::gpu
