// `bench`: achieved bandwidth = (bytes read + bytes written) / time, median of reps timed with
// CUDA events after warm-up, beside cudaMemcpy device-to-device measured in the same run.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "api_internal.h"
#include "kvlab/formats.h"
#include "kvlab_gpu/gpu.h"
#include "util.h"

// The dtype column's names of the kernels' input and output types.
namespace kvlab {
template <>
struct EnumNames<gpu::InType> {
  static constexpr EnumName<gpu::InType> names[] = {{gpu::InType::F16, "f16 in"},
                                                    {gpu::InType::F32, "f32 in"}};
};
template <>
struct EnumNames<gpu::OutType> {
  static constexpr EnumName<gpu::OutType> names[] = {
      {gpu::OutType::F32, "f32 out"}, {gpu::OutType::F16, "f16 out"}, {gpu::OutType::Codes, "codes out"}};
};
}  // namespace kvlab

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

int64_t packed_total(const DevFormat& f) {
  return f.codes_bytes() + f.high_bytes() + f.index_bytes() +
         f.n_params() * f.param_size() * (f.has_zero() ? 2 : 1);
}

// The benchmark's device tensors: fp16 and fp32 inputs, an output of n fp32 values.
struct BenchInputs {
  const void* x16;
  const void* x32;
  void* out;
  int64_t n;
};

// Times quantize+pack (f16 and f32 in) and unpack+dequantize (f32 and f16 out) of one format
// with one kernel variant; directions and layouts the variant does not change
// (kKernelVariants) are left to the default's rows.
void bench_variant(const BenchOptions& opt, const std::string& format, const DevFormat& f, DeviceQuant& q,
                   const KernelVariant& v, const BenchInputs& in, BenchResult& r) {
  const KernelConfig& cfg = v.config;
  const double packed = (double)packed_total(f);
  const unsigned layout = f.boost ? kBoost : f.channel ? kChannel : kToken;
  if (!(v.layouts & layout)) return;
  for (const InType it : {InType::F16, InType::F32}) {
    if (!(v.directions & kQuantize)) break;
    const void* x = it == InType::F16 ? in.x16 : in.x32;
    const char* label = "";
    const double ms =
        median_ms(opt.warmup, opt.reps, [&] { label = run_quantize(f, x, it, q.view(), 0, cfg); });
    const double bytes = (double)in.n * (it == InType::F16 ? 2 : 4) + packed;
    r.rows.push_back({format, "quantize+pack", enum_name(it), v.name, label, bytes, ms, bytes / (ms * 1e6),
                      bytes / (ms * 1e6) / r.copy_gbps});
  }
  for (const OutType ot : {OutType::F32, OutType::F16}) {
    if (!(v.directions & kDequantize)) break;
    const char* label = "";
    const double ms =
        median_ms(opt.warmup, opt.reps, [&] { label = run_dequantize(f, q.view(), in.out, ot, 0, cfg); });
    const double bytes = (double)in.n * (ot == OutType::F32 ? 4 : 2) + packed;
    r.rows.push_back({format, "unpack+dequant", enum_name(ot), v.name, label, bytes, ms, bytes / (ms * 1e6),
                      bytes / (ms * 1e6) / r.copy_gbps});
  }
  cuda_check(cudaDeviceSynchronize(), "bench");
}

// A float format (kFloatFormats): quantize with scales already on the device (what a cache with
// calibrated scales runs; f16 and f32 in), dequantize (f32 and f16 out), and the dynamic scales'
// absmax pass alone (a dynamic quantize is that pass plus the quantize row). FP4 quantize is timed
// for each selected variant without fast_div too (ieee-div: the recipe's code step); the other
// rows have one kernel set and read "default".
void bench_float(const BenchOptions& opt, const std::string& format, const FloatLayout& L, DeviceFloat& q,
                 const BenchInputs& in, const std::vector<const KernelVariant*>& variants, BenchResult& r) {
  const double packed = (double)(L.codes_bytes() + L.block_scale_bytes() + L.n_scales() * 4);
  float_scales(L, in.x16, InType::F16, q.view(), 0);
  for (const KernelVariant* v : variants) {
    if (v != &kKernelVariants[0] && (!L.fp4() || v->config.fast_div)) continue;
    for (const InType it : {InType::F16, InType::F32}) {
      const void* x = it == InType::F16 ? in.x16 : in.x32;
      const char* label = "";
      const double ms =
          median_ms(opt.warmup, opt.reps, [&] { label = quantize_float(L, x, it, q.view(), 0, v->config); });
      const double bytes = (double)in.n * (it == InType::F16 ? 2 : 4) + packed;
      r.rows.push_back({format, "quantize+pack", enum_name(it), v->name, label, bytes, ms, bytes / (ms * 1e6),
                        bytes / (ms * 1e6) / r.copy_gbps});
    }
  }
  for (const OutType ot : {OutType::F32, OutType::F16}) {
    const char* label = "";
    const double ms =
        median_ms(opt.warmup, opt.reps, [&] { label = dequantize_float(L, q.view(), in.out, ot, 0); });
    const double bytes = (double)in.n * (ot == OutType::F32 ? 4 : 2) + packed;
    r.rows.push_back({format, "unpack+dequant", enum_name(ot), "default", label, bytes, ms,
                      bytes / (ms * 1e6), bytes / (ms * 1e6) / r.copy_gbps});
  }
  if (L.n_scales() > 0) {
    const double ms =
        median_ms(opt.warmup, opt.reps, [&] { float_scales(L, in.x16, InType::F16, q.view(), 0); });
    const double bytes = (double)in.n * 2 + (double)L.n_scales() * 4;
    r.rows.push_back({format, "dynamic scales", enum_name(InType::F16), "default", "absmax", bytes, ms,
                      bytes / (ms * 1e6), bytes / (ms * 1e6) / r.copy_gbps});
  }
  cuda_check(cudaDeviceSynchronize(), "bench float");
}

double copy_bandwidth(const BenchOptions& opt, int64_t D) {  // device-to-device copy of 1 GiB
  const int64_t bytes = int64_t(1) << 30;
  DeviceBuffer a(bytes), b(bytes);
  fill_random(a.p, bytes / 4, D, false, 9, 0);
  const double ms = median_ms(opt.warmup, opt.reps, [&] {
    cuda_check(cudaMemcpyAsync(b.p, a.p, bytes, cudaMemcpyDeviceToDevice), "cudaMemcpyAsync");
  });
  return 2.0 * bytes / (ms * 1e6);
}

}  // namespace

BenchResult bench(const BenchOptions& opt) {
  BenchResult r;
  r.device = device_name();
  const std::vector<const KernelVariant*> variants = select_kernel_variants(opt.presets);
  const int64_t D = 128, T = 4096, N = std::max<int64_t>(1, opt.elements / (T * D));
  const int64_t n = N * T * D;
  const std::vector<int64_t> shape{N / 8 > 0 ? 8 : 1, N / 8 > 0 ? N / 8 : N, T, D};
  r.copy_gbps = copy_bandwidth(opt, D);
  DeviceBuffer x16(n * 2), x32(n * 4), out(n * 4);
  fill_random(x16.p, n, D, true, 1, 0);
  fill_random(x32.p, n, D, false, 1, 0);
  cuda_check(cudaDeviceSynchronize(), "fill");
  const BenchInputs in{x16.p, x32.p, out.p, n};
  for (const FormatEntry& e : kFormats) {
    if (!e.bench || !e.gpu) continue;
    if (!opt.only.empty() && std::string(e.name).find(opt.only) == std::string::npos &&
        std::string(e.spec).find(opt.only) == std::string::npos)
      continue;
    const QuantizerSpec spec = parse_quantizer(e.spec);
    const DevFormat f = make_format(shape, spec);
    DeviceQuant q(f);
    for (const KernelVariant* v : variants) bench_variant(opt, to_string(spec), f, q, *v, in, r);
  }
  if (variants.empty() || variants.front() != &kKernelVariants[0]) return r;  // float formats: default only
  for (const FormatEntry& e : kFloatFormats) {
    if (!e.bench || !e.gpu) continue;
    if (!opt.only.empty() && std::string(e.name).find(opt.only) == std::string::npos &&
        std::string(e.spec).find(opt.only) == std::string::npos)
      continue;
    const FloatLayout L = make_float_layout(shape, parse_float_spec(e.spec));
    DeviceFloat q(L);
    bench_float(opt, e.spec, L, q, in, variants, r);
  }
  return r;
}

void print_bench(const BenchResult& r, std::FILE* out) {
  std::fprintf(out, "device: %s\ncudaMemcpy D2D (1 GiB, read+write): %.0f GB/s\n", r.device.c_str(),
               r.copy_gbps);
  std::fprintf(out, "%-72s %-15s %-8s %-16s %-11s %9s %9s %8s %7s\n", "format", "direction", "dtype",
               "preset", "kernel", "GB moved", "ms", "GB/s", "of copy");
  for (const auto& b : r.rows)
    std::fprintf(out, "%-72s %-15s %-8s %-16s %-11s %9.3f %9.4f %8.0f %6.1f%%\n", b.format.c_str(),
                 b.direction.c_str(), b.dtype.c_str(), b.preset.c_str(), b.variant.c_str(), b.bytes / 1e9,
                 b.ms, b.gbps, 100.0 * b.of_copy);
}

}  // namespace kvlab::gpu
