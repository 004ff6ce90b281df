// The CUDA codec: gpu::quantize + gpu::dequantize (and their float formats) on this codec's
// device. A spec the kernels refuse (std::invalid_argument) is declined: core then runs it, and
// throws its own message if the spec or input is bad. One call at a time: gpu/'s launchers set
// a kernel's shared-memory cap (process-wide) right before launching it, so two host threads
// quantizing different shapes at once (eval applies its methods in parallel) make each other's
// launches fail ("too many resources requested for launch", seen on an H100).
#include "kvlab_eval_gpu/codec_gpu.h"

#include <mutex>
#include <stdexcept>

#include "cuda_util.h"
#include "kvlab_gpu/gpu.h"

namespace kvlab {
namespace {

class CudaCodec final : public Codec {
 public:
  explicit CudaCodec(int device) : device_(device) { gpu_eval::open_device(device); }

  bool uniform(const TensorView& x, const QuantizerSpec& spec, std::vector<float>& out) const override {
    if (spec.profile != Profile::Kvlab) return false;  // the GPU kernels are the kvlab profile's
    const std::lock_guard<std::mutex> lock(mutex_);
    gpu_eval::check(cudaSetDevice(device_), "cudaSetDevice");
    try {
      out = gpu::dequantize(gpu::quantize(x, spec));
    } catch (const std::invalid_argument&) {
      return false;
    }
    return true;
  }

  bool floating(const TensorView& x, const FloatSpec& s, const std::vector<float>& scales,
                std::vector<float>& out) const override {
    const std::lock_guard<std::mutex> lock(mutex_);
    gpu_eval::check(cudaSetDevice(device_), "cudaSetDevice");
    try {
      out = gpu::dequantize_float(scales.empty() ? gpu::quantize_float(x, s)
                                                 : gpu::quantize_float(x, s, scales));
    } catch (const std::invalid_argument&) {
      return false;
    }
    return true;
  }

 private:
  int device_;
  mutable std::mutex mutex_;
};

}  // namespace

std::shared_ptr<const Codec> cuda_codec(int device) { return std::make_shared<const CudaCodec>(device); }

}  // namespace kvlab
