// Host side of kvlab_gpu: format description from a spec, device buffers, and the GPU versions
// of core's quantize / dequantize / unpack_codes on host tensors.
#include <cuda_runtime.h>

#include <cstring>
#include <stdexcept>
#include <string>

#include "api_internal.h"
#include "kvlab/half.h"
#include "kvlab/pack.h"
#include "kvlab_gpu/gpu.h"

namespace kvlab::gpu {

namespace {
// Former presets whose kernels left production: where they went.
struct RetiredVariant {
  const char* name;
  const char* where;
};
constexpr RetiredVariant kRetiredVariants[] = {
    {"v4-alt", "gpu/dev/token_quant_loads.cu, gpu/dev/dequant_token_lanes.cu, gpu/dev/kitty_code_order.cu"},
    {"v4-tcl1", "gpu/dev/dequant_token_lanes.cu"},
};
}  // namespace

const KernelVariant& find_kernel_variant(const std::string& name) {
  for (const KernelVariant& v : kKernelVariants)
    if (name == v.name || name == v.alias) return v;
  std::string choices;
  for (const KernelVariant& v : kKernelVariants)
    choices += (choices.empty() ? "" : ", ") + std::string(v.name) + " (" + v.alias + ")";
  for (const RetiredVariant& r : kRetiredVariants)
    if (name == r.name)
      throw std::invalid_argument(
          "kvlab-gpu: kernel preset '" + name + "' left production; its kernels are in " + r.where +
          " (build target per file, run with --validate / --bench); choose one of: " + choices);
  throw std::invalid_argument("kvlab-gpu: unknown kernel preset '" + name + "'; choose one of: " + choices);
}

std::vector<const KernelVariant*> select_kernel_variants(const std::vector<std::string>& names) {
  std::vector<const KernelVariant*> out;
  for (const KernelVariant& v : kKernelVariants) {
    bool wanted = names.empty();
    for (const std::string& n : names) wanted = wanted || &find_kernel_variant(n) == &v;
    if (wanted) out.push_back(&v);
  }
  for (const std::string& n : names) find_kernel_variant(n);  // unknown names throw even when others match
  return out;
}

namespace {
template <class E>
std::string bit_names(unsigned bits) {
  std::string out;
  for (const auto& n : EnumNames<E>::names)
    if (bits & n.value) out += (out.empty() ? "" : ", ") + std::string(n.name);
  return out;
}
}  // namespace

std::string direction_names(unsigned directions) { return bit_names<KernelDirection>(directions); }
std::string layout_names(unsigned layouts) { return bit_names<KernelLayout>(layouts); }

std::string kernel_variant_help() {
  std::string out;
  for (const KernelVariant& v : kKernelVariants)
    out += "  " + std::string(v.name) + " (was " + v.alias + "): " + direction_names(v.directions) + "; " +
           layout_names(v.layouts) + ". " + v.note + "\n";
  return out;
}

void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("kvlab-gpu: ") + what + ": " + cudaGetErrorString(e));
}

std::string device_problem() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return std::string("no CUDA device: cudaGetDeviceCount failed (") + cudaGetErrorString(e) + ")";
  }
  if (n == 0) return "no CUDA device: cudaGetDeviceCount reports 0 devices";
  return "";
}

std::string device_name() {
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) return "?";
  return std::string(p.name) + " (sm_" + std::to_string(p.major) + std::to_string(p.minor) + ", " +
         std::to_string(p.multiProcessorCount) + " SMs, " + std::to_string(p.totalGlobalMem >> 20) + " MiB)";
}

DevFormat make_format(const std::vector<int64_t>& shape, const QuantizerSpec& spec) {
  if (spec.profile != Profile::Kvlab)
    throw std::invalid_argument(std::string("kvlab-gpu: profile=") + to_string(spec.profile) +
                                " has no GPU kernels; only the default kvlab profile does");
  return make_layout(shape, spec);
}

DevFormat make_format(const QuantizedTensor& q) { return make_format(q.shape, q.spec); }

DeviceQuant::DeviceQuant(const DevFormat& fmt) : f(fmt) {
  codes = DeviceBuffer(f.codes_bytes() + 16);
  scale = DeviceBuffer(f.n_params() * f.param_size() + 16);
  if (f.has_zero()) zero = DeviceBuffer(f.n_params() * f.param_size() + 16);
  if (f.boost) {
    high = DeviceBuffer(f.high_bytes() + 16);
    index = DeviceBuffer(f.index_bytes() + 16);
  }
  overflow = DeviceBuffer(sizeof(int));
  cuda_check(cudaMemset(overflow.p, 0, sizeof(int)), "cudaMemset");
}

DevQuant DeviceQuant::view() const {
  DevQuant q;
  q.codes = static_cast<uint8_t*>(codes.p);
  q.scale = scale.p;
  q.zero = zero.p;
  q.high = static_cast<uint8_t*>(high.p);
  q.index = static_cast<uint8_t*>(index.p);
  q.overflow = static_cast<int*>(overflow.p);
  return q;
}

DeviceBuffer::DeviceBuffer(int64_t bytes) : n(bytes) {
  cuda_check(cudaMalloc(&p, (size_t)bytes), "cudaMalloc");
}
DeviceBuffer::~DeviceBuffer() {
  if (p) cudaFree(p);
}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (p) cudaFree(p);
    p = o.p;
    n = o.n;
    o.p = nullptr;
    o.n = 0;
  }
  return *this;
}

const char* run_quantize(const DevFormat& f, const void* x, InType in, DevQuant q, cudaStream_t s,
                         const KernelConfig& cfg) {
  if (f.boost) return quantize_boost(f, x, in, q, s, cfg);
  if (f.channel) return quantize_channel(f, x, in, q, s, cfg);
  return quantize_token(f, x, in, q, s, cfg);
}

const char* run_dequantize(const DevFormat& f, DevQuant q, void* out, OutType o, cudaStream_t s,
                           const KernelConfig& cfg) {
  if (f.boost) return dequantize_boost(f, q, out, o, s, cfg);
  if (f.channel) return dequantize_channel(f, q, out, o, s, cfg);
  return dequantize_token(f, q, out, o, s, cfg);
}

namespace {

std::vector<float> params_to_host(const DeviceBuffer& b, int64_t n, bool half) {
  std::vector<float> out(n);
  if (half) {
    std::vector<uint16_t> h(n);
    cuda_check(cudaMemcpy(h.data(), b.p, n * 2, cudaMemcpyDeviceToHost), "cudaMemcpy");
    for (int64_t i = 0; i < n; ++i) out[i] = half_to_float(h[i]);
  } else {
    cuda_check(cudaMemcpy(out.data(), b.p, n * 4, cudaMemcpyDeviceToHost), "cudaMemcpy");
  }
  return out;
}

void params_to_device(const std::vector<float>& v, DeviceBuffer& b, bool half) {
  if (half) {
    std::vector<uint16_t> h(v.size());
    for (size_t i = 0; i < v.size(); ++i) h[i] = float_to_half(v[i]);
    cuda_check(cudaMemcpy(b.p, h.data(), h.size() * 2, cudaMemcpyHostToDevice), "cudaMemcpy");
  } else {
    cuda_check(cudaMemcpy(b.p, v.data(), v.size() * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
  }
}

template <class T>
void to_host(std::vector<T>& dst, const DeviceBuffer& b, int64_t n) {
  dst.resize(n);
  if (n) cuda_check(cudaMemcpy(dst.data(), b.p, n * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy");
}

}  // namespace

DeviceQuant upload(const QuantizedTensor& q) {
  const DevFormat f = make_format(q);
  DeviceQuant d(f);
  cuda_check(cudaMemcpy(d.codes.p, q.codes.data(), q.codes.size(), cudaMemcpyHostToDevice), "cudaMemcpy");
  params_to_device(q.scale, d.scale, f.half_params);
  if (f.has_zero()) params_to_device(q.zero, d.zero, f.half_params);
  if (f.boost) {
    cuda_check(cudaMemcpy(d.high.p, q.high.data(), q.high.size(), cudaMemcpyHostToDevice), "cudaMemcpy");
    cuda_check(cudaMemcpy(d.index.p, q.boost_index.data(), q.boost_index.size(), cudaMemcpyHostToDevice),
               "cudaMemcpy");
  }
  return d;
}

namespace {

template <class T>
std::vector<T> dequant_as(const QuantizedTensor& q, OutType o, const KernelConfig& cfg) {
  DeviceQuant d = upload(q);
  const int64_t n = numel(q.shape);
  DeviceBuffer out(n * (int64_t)sizeof(T) + 16);
  run_dequantize(d.f, d.view(), out.p, o, 0, cfg);
  cuda_check(cudaDeviceSynchronize(), "dequantize");
  std::vector<T> h;
  to_host(h, out, n);
  return h;
}

}  // namespace

namespace {

// The shape checks and geometry of a GPU quantize: everything of the result but its arrays.
QuantizedTensor quantized_header(const TensorView& x, const QuantizerSpec& spec) {
  QuantizedTensor q;
  q.spec = spec;
  q.shape = x.shape;
  const PackedLayout lo = check_input(x, spec, "kvlab-gpu quantize");  // core's checks and messages
  q.group = lo.G;
  q.boost_k = lo.k;
  return q;
}

// A group whose scale or zero does not fit its storage fails the call, as on the CPU.
void throw_on_overflow(const DeviceQuant& d, const QuantizerSpec& spec) {
  int overflow = 0;
  cuda_check(cudaMemcpy(&overflow, d.overflow.p, sizeof(int), cudaMemcpyDeviceToHost), "cudaMemcpy");
  if (overflow)
    throw std::invalid_argument(std::string("kvlab-gpu quantize: a group's scale or zero overflows ") +
                                (d.f.half_params ? "fp16" : "fp32") + " (spec " + to_string(spec) +
                                "); use params=fp32 or more bits");
}

void download(const DeviceQuant& d, QuantizedTensor& q) {
  const DevFormat& f = d.f;
  to_host(q.codes, d.codes, f.codes_bytes());
  q.scale = params_to_host(d.scale, f.n_params(), f.half_params);
  if (f.has_zero()) q.zero = params_to_host(d.zero, f.n_params(), f.half_params);
  if (f.boost) {
    to_host(q.high, d.high, f.high_bytes());
    to_host(q.boost_index, d.index, f.index_bytes());
  }
}

}  // namespace

namespace {

// Runs the quantize kernels on `in` (the input in device memory, padded by 16 bytes: the kernels'
// vector loads may read past the end) and downloads the result into q.
QuantizedTensor run_and_download(QuantizedTensor q, const DeviceBuffer& in, DType dtype,
                                 const KernelConfig& cfg, std::string* variant) {
  const DevFormat f = make_format(q);
  DeviceQuant d(f);
  const char* v = run_quantize(f, in.p, dtype == DType::F16 ? InType::F16 : InType::F32, d.view(), 0, cfg);
  cuda_check(cudaDeviceSynchronize(), "quantize");
  if (variant) *variant = v;
  throw_on_overflow(d, q.spec);
  download(d, q);
  return q;
}

}  // namespace

QuantizedTensor quantize(const TensorView& x, const QuantizerSpec& spec, const KernelConfig& cfg,
                         std::string* variant) {
  QuantizedTensor q = quantized_header(x, spec);
  const int64_t bytes = x.numel() * (x.dtype == DType::F16 ? 2 : 4);
  DeviceBuffer in(bytes + 16);
  cuda_check(cudaMemcpy(in.p, x.data, bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
  return run_and_download(std::move(q), in, x.dtype, cfg, variant);
}

QuantizedTensor quantize_device_input(const TensorView& x, const QuantizerSpec& spec, const KernelConfig& cfg,
                                      std::string* variant) {
  QuantizedTensor q;
  q.spec = spec;
  q.shape = x.shape;
  const PackedLayout lo = make_layout(x.shape, spec);  // core's shape checks; finiteness is the caller's
  q.group = lo.G;
  q.boost_k = lo.k;
  const int64_t bytes = x.numel() * (x.dtype == DType::F16 ? 2 : 4);
  DeviceBuffer in(bytes + 16);
  cuda_check(cudaMemcpy(in.p, x.data, bytes, cudaMemcpyDeviceToDevice), "cudaMemcpy");
  return run_and_download(std::move(q), in, x.dtype, cfg, variant);
}

std::vector<float> dequantize(const QuantizedTensor& q, const KernelConfig& cfg) {
  return dequant_as<float>(q, OutType::F32, cfg);
}
std::vector<uint16_t> dequantize_half(const QuantizedTensor& q, const KernelConfig& cfg) {
  return dequant_as<uint16_t>(q, OutType::F16, cfg);
}
std::vector<uint8_t> unpack_codes(const QuantizedTensor& q, const KernelConfig& cfg) {
  return dequant_as<uint8_t>(q, OutType::Codes, cfg);
}

}  // namespace kvlab::gpu
