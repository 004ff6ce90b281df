// Internal host helpers shared by api.cpp, validate.cpp and bench.cpp.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "kernels.h"
#include "kvlab/quantizer.h"

namespace kvlab::gpu {

void cuda_check(cudaError_t e, const char* what);

struct DeviceBuffer {
  void* p = nullptr;
  int64_t n = 0;
  DeviceBuffer() = default;
  explicit DeviceBuffer(int64_t bytes);
  DeviceBuffer(DeviceBuffer&& o) noexcept : p(o.p), n(o.n) {
    o.p = nullptr;
    o.n = 0;
  }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();
};

struct DeviceQuant {
  DevFormat f;
  DeviceBuffer codes, scale, zero, high, index, overflow;
  explicit DeviceQuant(const DevFormat& fmt);
  DevQuant view() const;
};

// A float-format tensor (kvlab/float_format.h) in device buffers.
struct DeviceFloat {
  FloatLayout L;
  DeviceBuffer codes, scale, block_scale;
  explicit DeviceFloat(const FloatLayout& layout);
  DevFloat view() const;
};

// core's make_layout, for the profiles that have kernels (std::invalid_argument otherwise).
DevFormat make_format(const std::vector<int64_t>& shape, const QuantizerSpec& spec);
DevFormat make_format(const QuantizedTensor& q);
const char* run_quantize(const DevFormat& f, const void* x, InType in, DevQuant q, cudaStream_t s,
                         const KernelConfig& cfg);
const char* run_dequantize(const DevFormat& f, DevQuant q, void* out, OutType o, cudaStream_t s,
                           const KernelConfig& cfg);
// A host QuantizedTensor in device buffers.
DeviceQuant upload(const QuantizedTensor& q);

}  // namespace kvlab::gpu
