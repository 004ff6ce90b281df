// `bench`: achieved bandwidth = (bytes read + bytes written) / time, median of reps timed with
// CUDA events after warm-up, beside cudaMemcpy device-to-device measured in the same run.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "api_internal.h"
#include "kvlab_gpu/gpu.h"
#include "util.h"

namespace kvlab::gpu {
namespace {

template <class F>
double median_ms(int warmup, int reps, F&& f) {
  cudaEvent_t a, b;
  cuda_check(cudaEventCreate(&a), "cudaEventCreate");
  cuda_check(cudaEventCreate(&b), "cudaEventCreate");
  for (int i = 0; i < warmup; ++i) f();
  cuda_check(cudaDeviceSynchronize(), "warm-up");
  std::vector<float> ms(reps);
  for (int i = 0; i < reps; ++i) {
    cuda_check(cudaEventRecord(a), "cudaEventRecord");
    f();
    cuda_check(cudaEventRecord(b), "cudaEventRecord");
    cuda_check(cudaEventSynchronize(b), "cudaEventSynchronize");
    cuda_check(cudaEventElapsedTime(&ms[i], a, b), "cudaEventElapsedTime");
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[reps / 2];
}

const char* kBenchFormats[] = {
    "scheme=sym,bits=8,axis=channel,group=all,params=fp32",  // INT8 per-channel
    "scheme=sym,bits=8,axis=channel,group=128,params=fp32",
    "scheme=asym,bits=2,axis=channel,group=128,params=fp16",  // KIVI-style keys
    "scheme=asym,bits=4,axis=channel,group=128,params=fp16",
    "scheme=asym,bits=8,axis=channel,group=128,params=fp32",
    "scheme=asym,bits=2,axis=token,group=128,params=fp16",  // KIVI-style values
    "scheme=asym,bits=4,axis=token,group=32,params=fp16",
    "scheme=asym,bits=8,axis=token,group=128,params=fp32",
    "scheme=asym,bits=2,axis=channel,group=128,params=fp16,profile=kvlab,boost=0.125",  // Kitty keys
    "scheme=asym,bits=4,axis=channel,group=128,params=fp16,profile=kvlab,boost=0.125",
};

int64_t packed_total(const DevFormat& f) {
  return f.codes_bytes() + f.high_bytes() + f.index_bytes() +
         f.n_params() * f.param_size() * (f.has_zero() ? 2 : 1);
}

}  // namespace

BenchResult bench(const BenchOptions& opt) {
  BenchResult r;
  r.device = device_name();
  const int64_t D = 128, T = 4096, N = std::max<int64_t>(1, opt.elements / (T * D));
  const int64_t n = N * T * D;
  const std::vector<int64_t> shape{N / 8 > 0 ? 8 : 1, N / 8 > 0 ? N / 8 : N, T, D};
  {  // device-to-device copy of 1 GiB
    const int64_t bytes = int64_t(1) << 30;
    DeviceBuffer a(bytes), b(bytes);
    fill_random(a.p, bytes / 4, D, false, 9, 0);
    const double ms = median_ms(opt.warmup, opt.reps, [&] {
      cuda_check(cudaMemcpyAsync(b.p, a.p, bytes, cudaMemcpyDeviceToDevice), "cudaMemcpyAsync");
    });
    r.copy_gbps = 2.0 * bytes / (ms * 1e6);
  }
  DeviceBuffer x16(n * 2), x32(n * 4), out(n * 4);
  fill_random(x16.p, n, D, true, 1, 0);
  fill_random(x32.p, n, D, false, 1, 0);
  cuda_check(cudaDeviceSynchronize(), "fill");
  const std::vector<std::string> presets = opt.presets.empty() ? kernel_presets() : opt.presets;
  for (const char* s : kBenchFormats) {
    if (!opt.only.empty() && std::string(s).find(opt.only) == std::string::npos) continue;
    const QuantizerSpec spec = parse_quantizer(s);
    const int group = resolve_group(shape, spec);
    const DevFormat f = make_format(shape, spec, group, spec.boosted() ? boost_count((int)D, spec.boost) : 0);
    DeviceQuant q(f);
    const int64_t packed = packed_total(f);
    for (const std::string& preset : presets) {
      use_kernel_preset(preset);
      // v4-ieee / v4-keys change quantize arithmetic only, v4-tcl1 the dequantize shape only.
      for (int in = 0; in < 2 && preset != "v4-tcl1"; ++in) {
        const void* x = in == 0 ? x16.p : x32.p;
        const InType it = in == 0 ? InType::F16 : InType::F32;
        const char* v = "";
        const double ms = median_ms(opt.warmup, opt.reps, [&] { v = run_quantize(f, x, it, q.view(), 0); });
        const double bytes = (double)n * (in == 0 ? 2 : 4) + (double)packed;
        r.rows.push_back({s, "quantize+pack", in == 0 ? "f16 in" : "f32 in", preset, v, bytes, ms,
                          bytes / (ms * 1e6), bytes / (ms * 1e6) / r.copy_gbps});
      }
      if (preset == "v4-ieee" || preset == "v4-keys") continue;
      for (int o = 0; o < 2; ++o) {
        const OutType ot = o == 0 ? OutType::F32 : OutType::F16;
        const char* v = "";
        const double ms =
            median_ms(opt.warmup, opt.reps, [&] { v = run_dequantize(f, q.view(), out.p, ot, 0); });
        const double bytes = (double)n * (o == 0 ? 4 : 2) + (double)packed;
        r.rows.push_back({s, "unpack+dequant", o == 0 ? "f32 out" : "f16 out", preset, v, bytes, ms,
                          bytes / (ms * 1e6), bytes / (ms * 1e6) / r.copy_gbps});
      }
      cuda_check(cudaDeviceSynchronize(), "bench");
    }
    use_kernel_preset("v4");
  }
  return r;
}

void print_bench(const BenchResult& r, std::FILE* out) {
  std::fprintf(out, "device: %s\ncudaMemcpy D2D (1 GiB, read+write): %.0f GB/s\n", r.device.c_str(),
               r.copy_gbps);
  std::fprintf(out, "%-72s %-15s %-8s %-8s %-11s %9s %9s %8s %7s\n", "format", "direction", "dtype", "preset",
               "kernel", "GB moved", "ms", "GB/s", "of copy");
  for (const auto& b : r.rows)
    std::fprintf(out, "%-72s %-15s %-8s %-8s %-11s %9.3f %9.4f %8.0f %6.1f%%\n", b.format.c_str(),
                 b.direction.c_str(), b.dtype.c_str(), b.preset.c_str(), b.variant.c_str(), b.bytes / 1e9,
                 b.ms, b.gbps, 100.0 * b.of_copy);
}

}  // namespace kvlab::gpu
