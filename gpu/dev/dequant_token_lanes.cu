// Dequantize lane shapes: how many token lanes share a channel chunk (TCL) in the register
// dequantize kernels of the per-channel format (gpu/src/quant_channel.cu's
// channel_dequant_regs) and of Kitty pages (quant_boost.cu's boost_dequant_regs). Production
// keeps TCL = 2 (kernels.h's kDequantTokenLanesLog2); this file keeps the shapes it beat.
//
// A unit is V channels (one 16-byte store per token: 4 fp32 or 8 fp16) x 16 tokens. Lanes: TCL
// consecutive token chunks fastest (code loads: TCL * 2 * BITS contiguous bytes of a channel
// row), then 32/TCL channel chunks (stores: 512/TCL contiguous bytes of each token row).
//
// Kernels (numbers for --bench; history from docs/PERFORMANCE.md, H200, runs 7-10):
//   1. TCL = 1 (former preset v4-tcl1): whole 512-byte token-row runs per warp store, scattered
//      code loads. Run 9: about equal to TCL = 2.
//   2. TCL = 2 (production): 256-byte row runs. Run 10: f32 out 83-90% of copy; kept.
//   3. TCL = 4 (former preset v4-alt's dequantize): 128-byte runs. Run 9: 5-8 points below
//      TCL = 2 on f32 out.
//   4. TCL = 8: the first shape (run 5). Run 7: below TCL = 4 (f32 out 2-8 points).
// Build: target kvlab_gpu_dev_dequant_token_lanes. Run: build/gpu/dev/dequant_token_lanes
// [--validate] [--bench]; --validate exits 1 on any byte that differs from core's dequantize.
#include "dev_common.cuh"

namespace kvlab::gpu::dev {

// ---- The kernels, as production had them when the choice was made (tcl_log2 at run time).

template <int V, bool SYM, int BITS, bool F16OUT>
__global__ void __launch_bounds__(256)
    channel_dequant_lanes(DevFormat f, DevQuant q, void* __restrict__ out, int tcl_log2) {
  constexpr int NW = BITS / 2, PER = 32 / BITS;
  const int D = (int)f.D, CC = D / V;
  const uint32_t chunks = (uint32_t)(f.T / 16), tiles = (chunks + (1u << tcl_log2) - 1) >> tcl_log2;
  const uint32_t u = blockIdx.x * blockDim.x + threadIdx.x;
  const int t8 = (int)(u & ((1u << tcl_log2) - 1));
  const uint32_t r1 = u >> tcl_log2;
  const int cc = (int)(r1 % (uint32_t)CC);
  const uint32_t r2 = r1 / (uint32_t)CC, chunk = ((r2 % tiles) << tcl_log2) + t8;
  const int64_t n = r2 / tiles;
  if (n >= f.N || chunk >= chunks) return;
  const int64_t t0 = chunk * 16, g = t0 / f.G;
  const int c0 = cc * V;
  uint32_t w[V][NW];
  float sc[V], ze[V];
#pragma unroll
  for (int j = 0; j < V; ++j) {
    const uint8_t* src = q.codes + (n * D + c0 + j) * f.row_bytes + t0 * BITS / 8;
    if constexpr (NW == 1) {
      w[j][0] = __ldg(reinterpret_cast<const uint32_t*>(src));
    } else if constexpr (NW == 2) {
      const uint2 t = __ldg(reinterpret_cast<const uint2*>(src));
      w[j][0] = t.x;
      w[j][1] = t.y;
    } else {
      const uint4 t = __ldg(reinterpret_cast<const uint4*>(src));
      w[j][0] = t.x;
      w[j][1] = t.y;
      w[j][2] = t.z;
      w[j][3] = t.w;
    }
    const int64_t pi = (n * D + c0 + j) * f.groups + g;
    sc[j] = load_param(q.scale, pi, f.half_params);
    ze[j] = SYM ? 0.0f : load_param(q.zero, pi, f.half_params);
  }
  int64_t e = (n * f.T + t0) * D + c0;
#pragma unroll
  for (int i = 0; i < 16; ++i, e += D) {
    float y[V];
#pragma unroll
    for (int j = 0; j < V; ++j) y[j] = dequant_word<SYM, BITS>(w[j][i / PER], i % PER, sc[j], ze[j]);
    if constexpr (F16OUT) {
      *reinterpret_cast<uint4*>(static_cast<uint16_t*>(out) + e) = make_uint4(
          half2_bits(y[0], y[1]), half2_bits(y[2], y[3]), half2_bits(y[4], y[5]), half2_bits(y[6], y[7]));
    } else {
      *reinterpret_cast<float4*>(static_cast<float*>(out) + e) = make_float4(y[0], y[1], y[2], y[3]);
    }
  }
}

template <int V, int BITS, bool F16OUT>
__global__ void __launch_bounds__(256)
    boost_dequant_lanes(DevFormat f, DevQuant q, void* __restrict__ out, int tcl_log2) {
  const int D = (int)f.D, G = f.G, k = f.k, CC = D / V;
  const int tiles = (G / 16 + (1 << tcl_log2) - 1) >> tcl_log2;  // per page
  const uint32_t u = blockIdx.x * blockDim.x + threadIdx.x;
  const int t8 = (int)(u & ((1u << tcl_log2) - 1));
  const uint32_t r1 = u >> tcl_log2;
  const int cc = (int)(r1 % (uint32_t)CC);
  const uint32_t r2 = r1 / (uint32_t)CC;
  const int64_t w = r2 / (uint32_t)tiles;  // page (slice-major)
  const int chunk = ((int)(r2 % (uint32_t)tiles) << tcl_log2) + t8;
  if (w >= f.N * f.groups) return;
  const int64_t n = w / f.groups, pg = w % f.groups;
  const int len = (int)f.page_tokens(pg);
  if (chunk * 16 >= len) return;
  const int nbl = len * BITS / 8, nbh = len / 4, c0 = cc * V;
  const uint8_t* low = q.codes + n * f.slice_low() + pg * D * packed_bytes(G, BITS);
  const uint8_t* high = q.high + n * f.slice_high() + pg * k * packed_bytes(G, 2);
  uint32_t lw[V][BITS / 2], hw[V];
  float sc[V], ze[V];
#pragma unroll
  for (int j = 0; j < V; ++j) {
    const int c = c0 + j;
    const uint8_t* src = low + (int64_t)c * nbl + chunk * 2 * BITS;
    if constexpr (BITS == 2) {
      lw[j][0] = __ldg(reinterpret_cast<const uint32_t*>(src));
    } else {
      const uint2 t = __ldg(reinterpret_cast<const uint2*>(src));
      lw[j][0] = t.x;
      lw[j][BITS / 2 - 1] = t.y;
    }
    const int sl = __ldg(q.index + w * D + c);
    hw[j] = sl != 0xFF ? __ldg(reinterpret_cast<const uint32_t*>(high + (int64_t)sl * nbh + chunk * 4)) : 0u;
    sc[j] = load_param(q.scale, w * D + c, f.half_params);
    ze[j] = load_param(q.zero, w * D + c, f.half_params);
  }
  int64_t e = (n * f.T + pg * G + chunk * 16) * D + c0;
#pragma unroll
  for (int i = 0; i < 16; ++i, e += D) {
    float y[V];
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const uint32_t code = ((lw[j][(i * BITS) / 32] >> ((i * BITS) % 32)) & ((1u << BITS) - 1u)) |
                            (((hw[j] >> (2 * i)) & 3u) << BITS);
      y[j] = __fadd_rn(__fmul_rn(ucode_float(code), sc[j]), ze[j]);  // KvlabRecipe::asym_dequant
    }
    if constexpr (F16OUT) {
      *reinterpret_cast<uint4*>(static_cast<uint16_t*>(out) + e) = make_uint4(
          half2_bits(y[0], y[1]), half2_bits(y[2], y[3]), half2_bits(y[4], y[5]), half2_bits(y[6], y[7]));
    } else {
      *reinterpret_cast<float4*>(static_cast<float*>(out) + e) = make_float4(y[0], y[1], y[2], y[3]);
    }
  }
}

// ---- Launchers

template <int V, bool F16OUT>
void launch_channel(const DevFormat& f, DevQuant q, void* out, int tcl_log2) {
  const int64_t tcl = int64_t(1) << tcl_log2;
  const int64_t threads = f.N * ((f.T / 16 + tcl - 1) / tcl) * tcl * (f.D / V);
  const unsigned grid = (unsigned)cdiv(threads, 256);
  auto go = [&](auto kern) { kern<<<grid, 256>>>(f, q, out, tcl_log2); };
  if (f.sym) {
    switch (f.bits) {
      case 2: go(channel_dequant_lanes<V, true, 2, F16OUT>); break;
      case 4: go(channel_dequant_lanes<V, true, 4, F16OUT>); break;
      default: go(channel_dequant_lanes<V, true, 8, F16OUT>); break;
    }
  } else {
    switch (f.bits) {
      case 2: go(channel_dequant_lanes<V, false, 2, F16OUT>); break;
      case 4: go(channel_dequant_lanes<V, false, 4, F16OUT>); break;
      default: go(channel_dequant_lanes<V, false, 8, F16OUT>); break;
    }
  }
  check_launch("channel_dequant_lanes");
}

template <int V, bool F16OUT>
void launch_boost(const DevFormat& f, DevQuant q, void* out, int tcl_log2) {
  const int64_t tcl = int64_t(1) << tcl_log2;
  const int64_t threads = f.N * f.groups * ((f.G / 16 + tcl - 1) / tcl) * tcl * (f.D / V);
  const unsigned grid = (unsigned)cdiv(threads, 256);
  if (f.bits == 2)
    boost_dequant_lanes<V, 2, F16OUT><<<grid, 256>>>(f, q, out, tcl_log2);
  else
    boost_dequant_lanes<V, 4, F16OUT><<<grid, 256>>>(f, q, out, tcl_log2);
  check_launch("boost_dequant_lanes");
}

// Kernel number k (1-4) = TCL 2^(k-1), on a plain per-channel or Kitty tensor.
void run_kernel(int k, const DevFormat& f, DevQuant q, void* out, bool f16_out) {
  const int tl = k - 1;
  if (f.boost) {
    if (f16_out)
      launch_boost<8, true>(f, q, out, tl);
    else
      launch_boost<4, false>(f, q, out, tl);
  } else {
    if (f16_out)
      launch_channel<8, true>(f, q, out, tl);
    else
      launch_channel<4, false>(f, q, out, tl);
  }
}

// Formats these kernels take (2/4/8 bits per channel, Kitty 2/4 bits; T, G multiples of 16).
const char* kSpecs[] = {
    "scheme=sym,bits=8,axis=channel,group=128,params=fp32",
    "scheme=asym,bits=2,axis=channel,group=128,params=fp16",
    "scheme=asym,bits=4,axis=channel,group=32,params=fp32",
    "scheme=asym,bits=8,axis=channel,group=all,params=fp16",
    "scheme=asym,bits=2,axis=channel,group=128,params=fp16,profile=kvlab,boost=0.125",
    "scheme=asym,bits=4,axis=channel,group=32,params=fp32,profile=kvlab,boost=0.25",
};
constexpr int kKernels = 4;

int64_t validate_all() {
  int64_t bad = 0;
  for (const std::vector<int64_t>& shape :
       {std::vector<int64_t>{2, 2, 368, 128}, std::vector<int64_t>{1, 3, 512, 64}})
    for (const char* s : kSpecs) {
      const HostData d = make_data(shape, 7);
      const QuantizedTensor cpu =
          kvlab::quantize(TensorView{d.f32.data(), DType::F32, d.shape}, parse_quantizer(s));
      const std::vector<float> r32 = kvlab::dequantize(cpu);
      const std::vector<uint16_t> r16 = kvlab::dequantize_half(cpu);
      DeviceTensor t(dev_format(cpu));
      upload(cpu, t);
      Buffer out(numel(shape) * 4);
      for (int k = 1; k <= kKernels; ++k)
        for (bool f16 : {false, true}) {
          run_kernel(k, t.f, t.view(), out.p, f16);
          check(cudaDeviceSynchronize(), "dequantize");
          const int64_t m = f16 ? diff_bytes(r16, down<uint16_t>(out.p, numel(shape)))
                                : diff_bytes(r32, down<float>(out.p, numel(shape)));
          std::printf("validate kernel %d %-80s %s out %s: %lld mismatching bytes\n", k, s,
                      f16 ? "f16" : "f32", shape_string(shape).c_str(), (long long)m);
          bad += m;
        }
    }
  return bad;
}

void bench_all(const Options& o) {
  const double copy = copy_gbps(o.reps);
  std::printf("cudaMemcpy D2D: %.0f GB/s\n", copy);
  print_bench_header();
  const int64_t N = std::max<int64_t>(1, o.elements / (4096 * 128));
  const std::vector<int64_t> shape{N, 4096, 128};
  const HostData d = make_data(shape, 3);
  Buffer out(numel(shape) * 4);
  for (const char* s : kSpecs) {
    const QuantizedTensor cpu =
        kvlab::quantize(TensorView{d.f16.data(), DType::F16, d.shape}, parse_quantizer(s));
    DeviceTensor t(dev_format(cpu));
    upload(cpu, t);
    const double packed = (double)packed_total(t.f);
    for (int k = 1; k <= kKernels; ++k)
      for (bool f16 : {false, true}) {
        const double ms = median_ms(o.reps, [&] { run_kernel(k, t.f, t.view(), out.p, f16); });
        print_bench_row(k, s, f16 ? "f16 out" : "f32 out", (double)numel(shape) * (f16 ? 2 : 4) + packed, ms,
                        copy);
      }
  }
}

}  // namespace kvlab::gpu::dev

int main(int argc, char** argv) {
  using namespace kvlab::gpu::dev;
  return run_main(argc, argv, "dequantize token lanes per channel chunk: TCL 1, 2, 4, 8", validate_all,
                  bench_all);
}
