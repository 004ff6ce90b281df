// CUDA tensors through the GPU kernels (builds with CUDA): kvlab._kvlab.gpu_quantize takes a
// device pointer and gives the same Quantized, byte for byte, as the CPU path. has_gpu says
// whether this build has it; kvlab/_gpu.py checks the tensor first. device_codec: the methods'
// quantize -> dequantize through the same kernels (Method.decode_final(device=...), kvlab.hf).
#include <memory>

#include "common.h"
#include "quantized.h"
#if defined(KVLAB_PY_GPU)
#include <cuda_runtime.h>

#include <map>
#include <mutex>

#include "kvlab_eval_gpu/codec_gpu.h"
#include "kvlab_gpu/gpu.h"
#include "on_device.h"
#endif

namespace kvlab::bind {

std::shared_ptr<const Codec> device_codec(int device) {
  if (device < 0) return nullptr;
#if defined(KVLAB_PY_GPU)
  static std::mutex mu;
  static std::map<int, std::shared_ptr<const Codec>> codecs;
  const std::lock_guard<std::mutex> lock(mu);
  std::shared_ptr<const Codec>& c = codecs[device];
  if (!c) c = cuda_codec(device);
  return c;
#else
  throw std::invalid_argument("device=" + std::to_string(device) +
                              ": this kvlab build has no GPU path (built without CUDA); pass device=None");
#endif
}

void bind_gpu(py::module_& m) {
#if defined(KVLAB_PY_GPU)
  m.attr("has_gpu") = true;
  m.def("gpu_device_problem", &gpu::device_problem);
  m.def(
      "gpu_quantize",
      [](uintptr_t data, const std::string& dtype, const std::vector<int64_t>& shape,
         const std::string& spec_text, int device) {
        const QuantizerSpec spec = parse_quantizer(spec_text);
        const TensorView x{reinterpret_cast<const void*>(data), dtype == "float16" ? DType::F16 : DType::F32,
                           shape};
        auto r = std::make_unique<Quantized>();
        on_device(device, [&] { r->q = gpu::quantize_device_input(x, spec); });
        r->shapes = part_shapes(r->q);
        return r;
      },
      py::arg("data"), py::arg("dtype"), py::arg("shape"), py::arg("spec"), py::arg("device"));
#else
  m.attr("has_gpu") = false;
#endif
}

}  // namespace kvlab::bind
