// Kitty page quantize: the channel order of the code phase in the radix-select page kernel
// (gpu/src/quant_boost.cu's boost_quant_radix). Production keeps the plain channel order with
// one code path for every channel; this file keeps the grouped order it beat.
//
// One block of 256 threads per page: raw page to shared memory; per-channel min/max and fp32
// |x| sum in token order; top-k by radix select in one warp; params; codes (unit = one channel
// x 16 tokens), staged, copied out.
//
// Kernels (numbers for --bench; history from docs/PERFORMANCE.md, H200, runs 8-11):
//   1. kperm = 0 (production): channels in plain order, every channel splits its code into low
//      and high bits in one branch. Run 11: 34.5% / 42.6% of copy (2-bit, f16 / f32 in).
//   2. kperm = 1 (former preset v4-alt's Kitty part): channels in non-boosted-then-boosted order
//      so a warp takes one branch, non-boosted codes packed by adding biased floats. Run 11:
//      31.5% / 40.7%; run 9's unsorted version of the split was worse still (29/39%).
// (Run 8's two channels per thread, 26%, was dropped before this file existed.)
// Build: target kvlab_gpu_dev_kitty_code_order. Run: build/gpu/dev/kitty_code_order
// [--validate] [--bench]; --validate exits 1 on any byte that differs from core's quantize.
#include "dev_common.cuh"

namespace kvlab::gpu::dev {

// ---- The kernel as production had it when the choice was made (kperm at run time).

struct BoostOrderSmem {
  int64_t tile, bytes;
};
template <class In>
BoostOrderSmem boost_order_smem(const DevFormat& f) {
  BoostOrderSmem b{};
  b.tile = (((int64_t)f.G * f.D * (int64_t)sizeof(In)) + 15) / 16 * 16;
  b.bytes = b.tile + f.D * (int64_t)(sizeof(float4) + sizeof(float) + 2 * sizeof(int)) +
            f.D * (int64_t)stage_pitch(packed_bytes(f.G, f.bits)) +
            std::max(f.k, 1) * (int64_t)stage_pitch(packed_bytes(f.G, 2));
  return b;
}

template <class In, int BITS>
__global__ void __launch_bounds__(256)
    boost_quant_order(const In* __restrict__ x, DevFormat f, DevQuant q, int64_t tile_bytes, int mm,
                      int allow_fast, int kperm) {
  extern __shared__ __align__(16) uint8_t smem[];
  const int D = (int)f.D, G = f.G, k = f.k;
  const int64_t n = blockIdx.x / f.groups, pg = blockIdx.x % f.groups, t0 = pg * G, w = blockIdx.x;
  const int len = (int)f.page_tokens(pg);
  In* tile = reinterpret_cast<In*>(smem);
  float4* sqp = reinterpret_cast<float4*>(smem + tile_bytes);  // D: zero, scale, rcp, fast
  float* score = reinterpret_cast<float*>(sqp + D);            // D: score, then levels
  int* slot = reinterpret_cast<int*>(score + D);               // D: slot or -1
  int* perm = slot + D;                                        // D: non-boosted channels, then boosted
  load_raw<In, 8>(tile, x + (n * f.T + t0) * D, len * D);
  __syncthreads();
  // 2. statistics, thread = channel (token-order fp32 sum: one dependent chain per channel)
  for (int c = threadIdx.x; c < D; c += blockDim.x) {
    float sum = 0.0f, mn = INFINITY, mx = -INFINITY;
    int32_t kmn = ord_key(INFINITY), kmx = ord_key(-INFINITY);
#pragma unroll 8
    for (int t = 0; t < len; ++t) {
      const float v = to_f(tile[t * D + c]);
      sum = __fadd_rn(sum, fabsf(v));
      if (mm) {
        mn = fminf(mn, v);
        mx = fmaxf(mx, v);
      } else {
        const int32_t kv = ord_key(v);
        kmn = min(kmn, kv);
        kmx = max(kmx, kv);
      }
    }
    if (!mm) {
      mn = key_float(kmn);
      mx = key_float(kmx);
    }
    score[c] = sum;
    sqp[c] = make_float4(mn, mx, 0.0f, 0.0f);
  }
  __syncthreads();
  // 3. top-k (warp 0). Lane holds channels c = m*32 + lane.
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x;
    constexpr int MC = 8;  // D <= 256
    uint32_t key[MC];
    const int mc = (D + 31) / 32;  // channel rows in use (ballots over unused rows are skipped)
#pragma unroll
    for (int m = 0; m < MC; ++m) key[m] = (m * 32 + lane < D) ? __float_as_uint(score[m * 32 + lane]) : 0u;
    const bool has[MC] = {0 * 32 + lane < D, 1 * 32 + lane < D, 2 * 32 + lane < D, 3 * 32 + lane < D,
                          4 * 32 + lane < D, 5 * 32 + lane < D, 6 * 32 + lane < D, 7 * 32 + lane < D};
    uint32_t thr = 0;
    int gt = 0;
    if (k > 0) {
      for (int b = 30; b >= 0; --b) {  // bit 31 (sign) is 0 for every score
        const uint32_t cand = thr | (1u << b);
        int cnt = 0;
#pragma unroll
        for (int m = 0; m < MC; ++m)
          if (m < mc) cnt += __popc(__ballot_sync(0xffffffffu, has[m] && key[m] >= cand));
        if (cnt >= k) thr = cand;
      }
#pragma unroll
      for (int m = 0; m < MC; ++m)
        if (m < mc) gt += __popc(__ballot_sync(0xffffffffu, has[m] && key[m] > thr));
    }
    const int need = k - gt;  // channels at the threshold score that are boosted, lowest first
    const unsigned lt = (1u << lane) - 1u;
    int eq_before = 0, boosted_before = 0;
#pragma unroll
    for (int m = 0; m < MC; ++m) {
      if (m >= mc) break;
      const bool eq = k > 0 && has[m] && key[m] == thr;
      const unsigned eqb = __ballot_sync(0xffffffffu, eq);
      const bool bst = k > 0 && has[m] && (key[m] > thr || (eq && eq_before + __popc(eqb & lt) < need));
      const unsigned bb = __ballot_sync(0xffffffffu, bst);
      const int c = m * 32 + lane, before = boosted_before + __popc(bb & lt);  // boosted channels below c
      if (has[m]) {
        slot[c] = bst ? before : -1;
        perm[bst ? D - k + before : c - before] = c;
      }
      eq_before += __popc(eqb);
      boosted_before += __popc(bb);
    }
  }
  __syncthreads();
  // 4. params per channel
  for (int c = threadIdx.x; c < D; c += blockDim.x) {
    const int sl = slot[c];
    const int levels = asym_levels(sl >= 0 ? BITS + 2 : BITS);
    const float4 mm4 = sqp[c];
    const GroupParams p = KvlabRecipe::asym_params(mm4.x, mm4.y, levels, f.half_params != 0);
    q.index[w * D + c] = sl >= 0 ? (uint8_t)sl : (uint8_t)0xFF;
    write_params(q, w * D + c, p, 0, f.half_params);
    const QP qp = make_qp(p, allow_fast);
    sqp[c] = make_float4(qp.zero, qp.scale, qp.rcp, qp.fast);
    score[c] = (float)levels;
  }
  __syncthreads();
  // 5. codes: unit = one channel x 16 tokens, channels fastest across lanes; words staged per
  // row, then rows copied out coalesced. kperm: channels in the order perm (non-boosted
  // ascending, then boosted) so a warp's lanes take the same branch, non-boosted channels
  // (codes < 2^bits) packed by adding biased codes (fastq.cuh); otherwise every channel splits
  // low and high bits (one branch for all). docs/PERFORMANCE.md has both timings.
  // (Adjacent channel pairs per thread measured slower: 64 registers, fewer warps.)
  const int chunks = len / 16, units = chunks * D;
  const int nbl = len * BITS / 8, nbh = len / 4;
  const int spl = stage_pitch(packed_bytes(G, BITS)), sph = stage_pitch(packed_bytes(G, 2));
  uint8_t* lst = reinterpret_cast<uint8_t*>(perm + D);  // D rows of spl bytes
  uint8_t* hst = lst + (int64_t)D * spl;                // k rows of sph bytes
  for (int i = threadIdx.x; i < units; i += blockDim.x) {
    const int c = kperm ? perm[i % D] : i % D, tc = i / D;
    const float4 pv = sqp[c];
    const QP qp{pv.x, pv.y, pv.z, pv.w};
    const float levels = score[c];
    const int sl = slot[c];
    const In* col = tile + tc * 16 * D + c;
    uint32_t lw[BITS / 2] = {}, hw = 0;
    if (kperm && qp.fast != 0.0f && sl < 0) {
#pragma unroll
      for (int m = 0; m < BITS / 2; ++m) {
        uint32_t acc = 0;
#pragma unroll
        for (int j = 0; j < 32 / BITS; ++j)
          acc += biased_code_levels(to_f(col[(m * (32 / BITS) + j) * D]), qp, levels) << (j * BITS);
        lw[m] = acc - magic_pack_bias<BITS>();
      }
    } else if (qp.fast != 0.0f) {
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        const uint32_t t = biased_code_levels(to_f(col[j * D]), qp, levels);
        lw[(j * BITS) / 32] |= (t & ((1u << BITS) - 1u)) << ((j * BITS) % 32);
        hw |= ((t >> BITS) & 3u) << (2 * j);
      }
    } else {
      const GroupParams gp{qp.scale, qp.zero};
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        const uint32_t code = KvlabRecipe::asym_code(to_f(col[j * D]), gp, (int)levels);
        lw[(j * BITS) / 32] |= (code & ((1u << BITS) - 1u)) << ((j * BITS) % 32);
        hw |= (code >> BITS) << (2 * j);
      }
    }
    uint32_t* ld = reinterpret_cast<uint32_t*>(lst + (int64_t)c * spl) + tc * (BITS / 2);
#pragma unroll
    for (int m = 0; m < BITS / 2; ++m) ld[m] = lw[m];
    if (sl >= 0) reinterpret_cast<uint32_t*>(hst + (int64_t)sl * sph)[tc] = hw;
  }
  __syncthreads();
  copy_rows(q.codes + n * f.slice_low() + pg * D * packed_bytes(G, BITS), nbl, lst, spl, D, nbl);
  if (k > 0) copy_rows(q.high + n * f.slice_high() + pg * k * packed_bytes(G, 2), nbh, hst, sph, k, nbh);
}

// ---- Launcher: kernel number k (1-2) -> kperm = k - 1.

template <class In>
void run_kernel(int k, const DevFormat& f, const In* x, DevQuant q) {
  const BoostOrderSmem b = boost_order_smem<In>(f);
  auto go = [&](auto kern) {
    check(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)b.bytes), "smem");
    kern<<<(unsigned)(f.N * f.groups), 256, b.bytes>>>(x, f, q, b.tile, 1, 1, k - 1);
  };
  if (f.bits == 2)
    go(boost_quant_order<In, 2>);
  else
    go(boost_quant_order<In, 4>);
  check_launch("boost_quant_order");
}

const char* kSpecs[] = {
    "scheme=asym,bits=2,axis=channel,group=128,params=fp16,profile=kvlab,boost=0.125",
    "scheme=asym,bits=4,axis=channel,group=128,params=fp16,profile=kvlab,boost=0.125",
    "scheme=asym,bits=2,axis=channel,group=32,params=fp16,profile=kvlab,boost=0.125",
    "scheme=asym,bits=4,axis=channel,group=32,params=fp32,profile=kvlab,boost=0.25",
};
constexpr int kKernels = 2;

// Launches kernel k on input x (fp16 or fp32).
const auto kRun = [](int k, const DevFormat& f, const auto* x, DevQuant q) { run_kernel(k, f, x, q); };

int64_t validate_all() {
  return validate_quantize({{2, 2, 368, 128}, {1, 3, 256, 64}}, {std::begin(kSpecs), std::end(kSpecs)},
                           kKernels, 11, kRun);
}

void bench_all(const Options& o) {
  bench_quantize(o, {std::begin(kSpecs), std::end(kSpecs)}, kKernels, kRun);
}

}  // namespace kvlab::gpu::dev

int main(int argc, char** argv) {
  using namespace kvlab::gpu::dev;
  return run_main(argc, argv, "Kitty page quantize: plain vs grouped channel order in the code phase",
                  validate_all, bench_all);
}
