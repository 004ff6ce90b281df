// Host side of the GPU float formats: core's float_quant.h functions on the device, same
// inputs, same bytes (quant_float.cu runs core's float_format.h recipe).
#include <cuda_runtime.h>

#include "api_internal.h"
#include "kvlab_gpu/gpu.h"

namespace kvlab::gpu {

DeviceFloat::DeviceFloat(const FloatLayout& layout) : L(layout) {
  codes = DeviceBuffer(L.codes_bytes() + 16);
  scale = DeviceBuffer((L.n_scales() + 1) * (int64_t)sizeof(float));  // never empty: kernels read scale[0]
  block_scale = DeviceBuffer(L.block_scale_bytes() + 16);
}

DevFloat DeviceFloat::view() const {
  return {static_cast<uint8_t*>(codes.p), static_cast<float*>(scale.p), static_cast<uint8_t*>(block_scale.p)};
}

namespace {

template <class T>
void to_device(DeviceBuffer& b, const std::vector<T>& v) {
  if (!v.empty())
    cuda_check(cudaMemcpy(b.p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy");
}
template <class T>
void to_host(std::vector<T>& v, const DeviceBuffer& b, int64_t n) {
  v.resize(n);
  if (n) cuda_check(cudaMemcpy(v.data(), b.p, n * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy");
}

// given: the scales, or null for dynamic scales computed on the device.
FloatQuantized quantize_with(const TensorView& x, const FloatSpec& s, const std::vector<float>* given,
                             std::string* variant, const KernelConfig& cfg) {
  const FloatLayout L = make_float_layout(x.shape, s);  // core's checks and messages
  check_finite(x, "kvlab-gpu quantize_float: input");
  if (given) check_float_scales(*given, L, s);
  DeviceFloat d(L);
  const int64_t esize = x.dtype == DType::F16 ? 2 : 4;
  DeviceBuffer in(x.numel() * esize + 16);
  cuda_check(cudaMemcpy(in.p, x.data, x.numel() * esize, cudaMemcpyHostToDevice), "cudaMemcpy");
  const InType it = x.dtype == DType::F16 ? InType::F16 : InType::F32;
  if (given)
    to_device(d.scale, *given);
  else
    float_scales(L, in.p, it, d.view(), 0);
  const char* v = quantize_float(L, in.p, it, d.view(), 0, cfg);
  cuda_check(cudaDeviceSynchronize(), "quantize_float");
  if (variant) *variant = v;
  FloatQuantized q{s, x.shape, {}, {}, {}};
  to_host(q.codes, d.codes, L.codes_bytes());
  to_host(q.scale, d.scale, L.n_scales());
  to_host(q.block_scale, d.block_scale, L.block_scale_bytes());
  return q;
}

template <class T>
std::vector<T> dequant_float_as(const FloatQuantized& q, OutType o) {
  const FloatLayout L = make_float_layout(q.shape, q.spec);
  if ((int64_t)q.codes.size() != L.codes_bytes() || (int64_t)q.scale.size() != L.n_scales() ||
      (int64_t)q.block_scale.size() != L.block_scale_bytes())
    throw std::invalid_argument("kvlab-gpu dequantize_float " + to_string(q.spec) +
                                ": arrays do not match shape " + shape_string(q.shape));
  DeviceFloat d(L);
  to_device(d.codes, q.codes);
  to_device(d.scale, q.scale);
  to_device(d.block_scale, q.block_scale);
  const int64_t n = numel(q.shape);
  DeviceBuffer out(n * (int64_t)sizeof(T) + 16);
  dequantize_float(L, d.view(), out.p, o, 0);
  cuda_check(cudaDeviceSynchronize(), "dequantize_float");
  std::vector<T> h;
  to_host(h, out, n);
  return h;
}

}  // namespace

FloatQuantized quantize_float(const TensorView& x, const FloatSpec& s, std::string* variant,
                              const KernelConfig& cfg) {
  return quantize_with(x, s, nullptr, variant, cfg);
}
FloatQuantized quantize_float(const TensorView& x, const FloatSpec& s, const std::vector<float>& scales,
                              std::string* variant, const KernelConfig& cfg) {
  return quantize_with(x, s, &scales, variant, cfg);
}
std::vector<float> dequantize_float(const FloatQuantized& q) {
  return dequant_float_as<float>(q, OutType::F32);
}
std::vector<uint16_t> dequantize_float_half(const FloatQuantized& q) {
  return dequant_float_as<uint16_t>(q, OutType::F16);
}

ArithCheck check_fp8_conversion() {
  ArithCheck c;
  c.mismatches = fp8_conversion_mismatches(&c.checked);
  return c;
}

ArithCheck check_fp4_code() {
  ArithCheck c;
  c.mismatches = fp4_code_mismatches(&c.checked);
  return c;
}

}  // namespace kvlab::gpu
