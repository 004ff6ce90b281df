#include "study_device.h"

#include <cstdio>
#include <memory>
#include <stdexcept>

#ifdef KVLAB_HAVE_EVAL_GPU
#include "kvlab_eval_gpu/attention_gpu.h"
#endif

namespace kvlab::cli {

StudyDevice open_study_device(const std::string& device) {
  StudyDevice d;
  if (device != "cuda") return d;
#ifdef KVLAB_HAVE_EVAL_GPU
  auto gpu = std::make_shared<CudaAttention>(cuda_device_for_this_rank());
  d.backend = cuda_backend(gpu);
  d.summary = [gpu] {
    const CudaAttentionTimes& t = gpu->times();
    char b[256];
    std::snprintf(b, sizeof b, "%s: %lld units, upload %.2f s, compute %.2f s (%.1f TFLOP/s fp64 GEMM)",
                  gpu->device_name().c_str(), (long long)t.units, t.upload, t.compute,
                  t.compute > 0 ? t.gemm_flops / t.compute * 1e-12 : 0.0);
    return std::string(b);
  };
  return d;
#else
  throw std::runtime_error("--device cuda: this kvlab was built without CUDA (no nvcc at configure time)");
#endif
}

void add_device_option(CLI::App* c, std::string& device) {
  c->add_option("--device", device,
                "cpu, or cuda: attention and metrics on the GPU of this process's local rank "
                "(docs/EVAL_JSON.md, Devices)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
}

}  // namespace kvlab::cli
