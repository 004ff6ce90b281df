// `attend-bench`: decode attention on packed caches, kvlab's dequantize (the first half of
// "dequantize then SDPA"), and the device-to-device copy, on one GPU; scripts/attend_sdpa.py
// times torch's SDPA on the same shapes and joins the rows.
#include <algorithm>
#include <cstdio>
#include <random>
#include <stdexcept>

#include "attn_cache.h"
#include "kvlab_gpu/gpu.h"

namespace kvlab::gpu {

namespace {

// Median milliseconds of f over reps, each after a 256 MiB write that evicts L2 (50 MB), so
// small caches are read from memory as in a real decode step.
template <class F>
double median_ms(int reps, F&& f) {
  DeviceBuffer flush(256 << 20);
  cudaEvent_t a, b;
  cuda_check(cudaEventCreate(&a), "cudaEventCreate");
  cuda_check(cudaEventCreate(&b), "cudaEventCreate");
  f();  // warm-up
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    cuda_check(cudaMemsetAsync(flush.p, i & 0xFF, flush.n), "cudaMemsetAsync");
    cuda_check(cudaEventRecord(a), "cudaEventRecord");
    f();
    cuda_check(cudaEventRecord(b), "cudaEventRecord");
    cuda_check(cudaEventSynchronize(b), "cudaEventSynchronize");
    float t = 0;
    cuda_check(cudaEventElapsedTime(&t, a, b), "cudaEventElapsedTime");
    ms.push_back(t);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

double copy_gbps(int reps) {
  const int64_t n = int64_t(1) << 30;
  DeviceBuffer src(n), dst(n);
  cuda_check(cudaMemset(src.p, 1, n), "cudaMemset");
  const double ms = median_ms(reps, [&] {
    cuda_check(cudaMemcpyAsync(dst.p, src.p, n, cudaMemcpyDeviceToDevice), "cudaMemcpyAsync");
  });
  return 2.0 * n / (ms * 1e6);
}

}  // namespace

void attend_bench(const AttnBenchOptions& opt, std::FILE* out) {
  std::vector<std::string> methods = opt.methods;
  if (methods.empty()) methods = {"fp16", "int8", "kivi-4", "kivi-2", "kitty", "CQ-4c8b"};
  const double copy = copy_gbps(opt.reps);
  std::FILE* csv = nullptr;
  std::string tmp;
  if (!opt.csv.empty()) {
    tmp = opt.csv + ".tmp";
    csv = std::fopen(tmp.c_str(), "w");
    if (!csv) throw std::runtime_error("attend-bench: cannot write " + tmp);
    std::fprintf(csv,
                 "device,copy_gbps,method,kernel,B,L,Hq,Hkv,D,splits,bytes,ms,gbps,of_copy,dequant_ms\n");
  }
  std::fprintf(out, "device: %s; copy %.0f GB/s (read + write)\n", device_name().c_str(), copy);
  std::fprintf(out, "%-8s %-6s %3s %7s %6s %12s %9s %8s %8s %11s\n", "method", "kernel", "B", "L", "splits",
               "bytes", "ms", "GB/s", "of_copy", "dequant_ms");
  std::mt19937_64 rng(1);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const std::string& name : methods) {
    int vec = 0, bits = 0, stages = 0;
    const bool vq = parse_vq_text(name, vec, bits, stages);
    const MethodPtr m = vq ? nullptr : parse_method(name);
    for (int B : opt.batches)
      for (int L : opt.lengths) {
        const auto cache = vq ? make_random_vq_cache(name, B, opt.Hkv, opt.D, L, 11)
                              : make_random_decode_cache(*m, B, opt.Hkv, opt.D, L, 11);
        const auto& c = cache->impl();
        const DecodeKernel kernel = pick_kernel(*cache, opt.Hq, opt.kernel);
        const int splits = auto_splits(*cache, kernel);
        DecodeLaunch run(c, opt.Hq, splits, kernel == DecodeKernel::Stream);
        std::vector<float> q((size_t)B * opt.Hq * opt.D);
        for (float& x : q) x = nd(rng);
        cuda_check(cudaMemcpy(run.q.p, q.data(), q.size() * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
        const double ms = median_ms(opt.reps, [&] { run.run(c, nullptr); });
        // dequantize the packed parts to fp16 with kvlab's kernels (what SDPA would then read);
        // -1: none for codebooks
        double dq_ms = vq ? -1 : 0;
        if (!c.packed.empty()) {
          std::vector<DeviceBuffer> outs;
          for (const DeviceQuant& d : c.packed) outs.emplace_back(d.f.N * d.f.T * d.f.D * 2);
          dq_ms = median_ms(opt.reps, [&] {
            for (size_t i = 0; i < c.packed.size(); ++i)
              run_dequantize(c.packed[i].f, c.packed[i].view(), outs[i].p, OutType::F16, nullptr,
                             KernelConfig{});
          });
        }
        const double gbps = (double)cache->bytes() / (ms * 1e6);
        std::fprintf(out, "%-8s %-6s %3d %7d %6d %12lld %9.4f %8.0f %7.1f%% %11.4f\n", name.c_str(),
                     decode_kernel_name(kernel), B, L, splits, (long long)cache->bytes(), ms, gbps,
                     100 * gbps / copy, dq_ms);
        std::fflush(out);
        if (csv)
          std::fprintf(csv, "\"%s\",%.1f,%s,%s,%d,%d,%d,%d,%d,%d,%lld,%.5f,%.1f,%.4f,%.5f\n",
                       device_name().c_str(), copy, name.c_str(), decode_kernel_name(kernel), B, L, opt.Hq,
                       opt.Hkv, opt.D, splits, (long long)cache->bytes(), ms, gbps, gbps / copy, dq_ms);
      }
  }
  if (csv) {
    std::fclose(csv);
    if (std::rename(tmp.c_str(), opt.csv.c_str()) != 0)
      throw std::runtime_error("attend-bench: cannot rename " + tmp + " to " + opt.csv);
  }
}

}  // namespace kvlab::gpu
