// kvlab_gpu: CUDA kernels that reproduce core's quantize / pack / unpack / dequantize byte for
// byte (default `kvlab` profile), their validation against the CPU reference, and a bandwidth
// benchmark. Host code only here; the kernels live in gpu/src/*.cu.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "kvlab/quantizer.h"
#include "kvlab/spec.h"
#include "kvlab/tensor.h"

namespace kvlab::gpu {

// Empty when a CUDA device is usable; otherwise why not ("no CUDA device: ...").
std::string device_problem();
std::string device_name();

// GPU versions of core's functions: same inputs, same outputs, byte for byte.
// `variant` (optional) receives the kernel path that ran ("tile", "two-pass", "page").
QuantizedTensor quantize(const TensorView& x, const QuantizerSpec& spec, std::string* variant = nullptr);
std::vector<float> dequantize(const QuantizedTensor& q);
std::vector<uint16_t> dequantize_half(const QuantizedTensor& q);
std::vector<uint8_t> unpack_codes(const QuantizedTensor& q);

// Kernel variants, process-wide: "v4" (default: fastest validated kernels), "v4-ieee" (v4
// kernels with the recipe's IEEE division), "v4-keys" (v4 with order-key min/max), "v4-alt"
// (runner-up shapes), "v4-tcl1" (dequantize with one token lane per channel chunk), "v3" (the
// previous kernels). bench times them side by side; validate checks every one.
std::vector<std::string> kernel_presets();
void use_kernel_preset(const std::string& name);  // std::invalid_argument if unknown

// Device arithmetic proofs behind the v4 kernels (gpu/src/fastq.cuh), run on the device.
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
  std::vector<std::string> presets;  // kernel presets to check (empty: all)
  std::string only;                  // formats whose spec contains this text (empty: all)
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
  std::string only;                  // run formats whose spec contains this text
  std::vector<std::string> presets;  // kernel presets (empty: all)
};
struct BenchResult {
  std::string device;
  double copy_gbps = 0;  // cudaMemcpy device-to-device, read + write
  std::vector<BenchRow> rows;
};
BenchResult bench(const BenchOptions& opt);
void print_bench(const BenchResult& r, std::FILE* out);

// Exit statuses of the command-line entry points.
constexpr int kExitMismatch = 1;
constexpr int kExitNoDevice = 2;

}  // namespace kvlab::gpu
