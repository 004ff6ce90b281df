// kvlab_gpu: CUDA kernels that reproduce core's quantize / pack / unpack / dequantize byte for
// byte (default `kvlab` profile), their validation against the CPU reference, and a bandwidth
// benchmark. Host code only here; the kernels live in gpu/src/*.cu.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "kvlab/enum_names.h"
#include "kvlab/float_quant.h"
#include "kvlab/quantizer.h"
#include "kvlab/spec.h"
#include "kvlab/tensor.h"
#include "kvlab_gpu/kernel_config.h"

namespace kvlab::gpu {

// Empty when a CUDA device is usable; otherwise why not ("no CUDA device: ...").
std::string device_problem();
std::string device_name();

// GPU versions of core's functions: same inputs, same outputs, byte for byte, for every
// KernelConfig. `variant` (optional) receives the kernel path that ran ("regs", "tile", ...).
QuantizedTensor quantize(const TensorView& x, const QuantizerSpec& spec, const KernelConfig& cfg = {},
                         std::string* variant = nullptr);
// quantize() of an input already in device memory: x.data points to numel(x.shape) contiguous
// fp16/fp32 values on the current device (a torch CUDA tensor). The same checks of shape and
// spec and the same bytes; the input's finiteness is the caller's to check (quantize() reads x
// on the host for that). It is copied once on the device into a padded buffer.
QuantizedTensor quantize_device_input(const TensorView& x, const QuantizerSpec& spec,
                                      const KernelConfig& cfg = {}, std::string* variant = nullptr);
std::vector<float> dequantize(const QuantizedTensor& q, const KernelConfig& cfg = {});
std::vector<uint16_t> dequantize_half(const QuantizedTensor& q, const KernelConfig& cfg = {});
std::vector<uint8_t> unpack_codes(const QuantizedTensor& q, const KernelConfig& cfg = {});

// core's float_quant.h on the GPU (FP8 with the hardware conversion, NVFP4, MXFP4): scales from
// x on the device (dynamic) or given (calibrated), byte for byte the CPU's.
// cfg: only fast_div matters (FP4's code step).
FloatQuantized quantize_float(const TensorView& x, const FloatSpec& s, std::string* variant = nullptr,
                              const KernelConfig& cfg = {});
FloatQuantized quantize_float(const TensorView& x, const FloatSpec& s, const std::vector<float>& scales,
                              std::string* variant = nullptr, const KernelConfig& cfg = {});
std::vector<float> dequantize_float(const FloatQuantized& q);
std::vector<uint16_t> dequantize_float_half(const FloatQuantized& q);

// The kKernelVariants entry named `name` (or its former preset name); std::invalid_argument
// naming the choices otherwise (and where a retired runner-up went).
const KernelVariant& find_kernel_variant(const std::string& name);
// The entries named in `names` (every entry when empty), in table order.
std::vector<const KernelVariant*> select_kernel_variants(const std::vector<std::string>& names);
// One line per variant ("  name (was alias): what it changes; note"), for --help and usage.
std::string kernel_variant_help();
// "quantize, dequantize" / "channel, token, boost": what a variant's kernels differ in.
std::string direction_names(unsigned directions);
std::string layout_names(unsigned layouts);

}  // namespace kvlab::gpu

namespace kvlab {
template <>
struct EnumNames<gpu::KernelDirection> {
  static constexpr EnumName<gpu::KernelDirection> names[] = {{gpu::kQuantize, "quantize"},
                                                             {gpu::kDequantize, "dequantize"}};
};
template <>
struct EnumNames<gpu::KernelLayout> {
  static constexpr EnumName<gpu::KernelLayout> names[] = {
      {gpu::kChannel, "channel"}, {gpu::kToken, "token"}, {gpu::kBoost, "boost"}};
};
}  // namespace kvlab

namespace kvlab::gpu {

// Device arithmetic proofs behind the register-tile kernels (gpu/src/fastq.cuh), run on the device.
struct ArithCheck {
  int64_t checked = 0;
  int64_t mismatches = 0;
};
// Fast quotient vs __fdiv_rn: all 2^23 scale significands in [1, 2) (every scale_step-th) x
// per_scale numerator significands (0: all 2^23, the exhaustive proof), plus random edge cases
// over the fast range through the whole code step.
ArithCheck check_fast_division(uint32_t per_scale, uint32_t scale_step = 1);
// HMNMX2 / FMNMX vs hd.h's total-order f_min/f_max.
ArithCheck check_hw_minmax();
// The hardware FP8 conversions vs minifloat.h's integer code: every fp16 value (float and
// f16x2 instructions), all 2^32 floats but NaN, all 256 codes decoded; e4m3 and e5m2.
ArithCheck check_fp8_conversion();
// FP4's fast code step (quant_float.cu) vs core's fp4_code, on the device.
ArithCheck check_fp4_code();

struct ValidationRow {
  std::string data;     // random, llama3-k, llama3-v, adversarial, ...
  std::string format;   // quantizer spec string
  std::string input;    // f16 / f32
  std::string variant;  // quantize kernel path
  int64_t elements = 0;
  int64_t bytes = 0;        // bytes compared (codes, params, planes, index, dequantized, codes)
  int64_t mismatches = 0;   // mismatching bytes
  double max_abs_diff = 0;  // max |GPU - CPU| over dequantized fp32 values
  std::string note;         // e.g. "both reject: ..."
};

// Extra inputs, e.g. the keys and values of a dump: (..., T, D) fp32 values; the fp16-input
// cases use them rounded to fp16.
struct NamedData {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;
};

struct ValidateOptions {
  bool small = false;                // skip the llama3-sized data (for compute-sanitizer runs)
  bool exhaustive_div = false;       // fastdiv row over all 2^46 significand pairs (~1 minute on an H200)
  bool arith_only = false;           // only the device-arithmetic rows (fp16-cvt, fastdiv, minmax)
  std::vector<std::string> presets;  // kKernelVariants names or aliases to check (empty: all)
  std::string only;                  // kFormats entries whose name or spec contains this text (empty: all)
  uint64_t seed = 1;
  std::vector<NamedData> extra;
};
std::vector<ValidationRow> validate(const ValidateOptions& opt);
void print_validation(const std::vector<ValidationRow>& rows, std::FILE* out);

struct BenchRow {
  std::string format, direction, dtype, preset, variant;
  double bytes = 0, ms = 0, gbps = 0, of_copy = 0;
};
struct BenchOptions {
  int64_t elements = int64_t(1) << 29;  // 1 GiB of fp16 input (2 GiB of fp32)
  int reps = 50;
  int warmup = 5;
  std::string only;                  // kFormats entries whose name or spec contains this text
  std::vector<std::string> presets;  // kKernelVariants names or aliases (empty: all)
};
struct BenchResult {
  std::string device;
  double copy_gbps = 0;  // cudaMemcpy device-to-device, read + write
  std::vector<BenchRow> rows;
};
BenchResult bench(const BenchOptions& opt);
void print_bench(const BenchResult& r, std::FILE* out);

// Exit statuses of the command-line entry points (0: ok).
constexpr int kExitMismatch = 1;
constexpr int kExitNoDevice = 2;
constexpr int kExitUsage = 3;

}  // namespace kvlab::gpu
