#include "study_device.h"

#include <cstdio>
#include <memory>
#include <stdexcept>

#ifdef KVLAB_HAVE_EVAL_GPU
#include "kvlab_eval_gpu/attention_gpu.h"
#include "kvlab_eval_gpu/codec_gpu.h"
#include "kvlab_eval_gpu/sensitivity_gpu.h"
#endif

namespace kvlab::cli {

StudyDevice open_study_device(const DeviceArgs& a) {
  StudyDevice d;
  if (a.device != "cuda") {
    if (a.share) throw std::invalid_argument("--share-gpu: only with --device cuda");
    if (a.methods_on == "cuda") throw std::invalid_argument("--methods-on cuda: only with --device cuda");
    return d;
  }
#ifdef KVLAB_HAVE_EVAL_GPU
  const int dev = cuda_device_for_this_rank(a.share);
  auto gpu = std::make_shared<CudaAttention>(dev);
  auto sens = std::make_shared<CudaSensitivity>(dev);
  d.backend = cuda_backend(gpu);
  d.sensitivity = cuda_sensitivity_backend(sens);
  if (a.methods_on != "cpu") d.codec = cuda_codec(dev);
  d.summary = [gpu, sens] {
    const CudaAttentionTimes& t = gpu->times();
    const CudaSensitivityTimes& s = sens->times();
    char b[384];
    if (s.units > 0)
      std::snprintf(b, sizeof b, "%s: %lld sensitivity units, upload %.2f s, compute %.2f s",
                    sens->device_name().c_str(), (long long)s.units, s.upload, s.compute);
    else
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

void add_device_option(CLI::App* c, DeviceArgs& a) {
  c->add_option("--device", a.device,
                "cpu, or cuda: attention and metrics on the GPU of this process's local rank "
                "(docs/EVAL_JSON.md, Devices)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  c->add_option(
       "--methods-on", a.methods_on,
       "where the methods quantize: cuda (gpu/'s kernels, core's bytes; the default with --device cuda, "
       "core on the CPU where no kernel exists) or cpu")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  c->add_flag(
      "--share-gpu", a.share,
      "with --device cuda under mpirun/srun: let a node's ranks share its GPUs (local rank mod the GPU "
      "count) instead of refusing more ranks than GPUs");
}

}  // namespace kvlab::cli
