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

struct ValidationRow {
  std::string data;        // random, llama3-k, llama3-v, adversarial, ...
  std::string format;      // quantizer spec string
  std::string input;       // f16 / f32
  std::string variant;     // quantize kernel path
  int64_t elements = 0;
  int64_t bytes = 0;       // bytes compared (codes, params, planes, index, dequantized, codes)
  int64_t mismatches = 0;  // mismatching bytes
  double max_abs_diff = 0; // max |GPU - CPU| over dequantized fp32 values
  std::string note;        // e.g. "both reject: ..."
};

// Extra inputs, e.g. the keys and values of a dump: (..., T, D) fp32 values; the fp16-input
// cases use them rounded to fp16.
struct NamedData {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;
};

struct ValidateOptions {
  bool small = false;  // skip the llama3-sized data (for compute-sanitizer runs)
  uint64_t seed = 1;
  std::vector<NamedData> extra;
};
std::vector<ValidationRow> validate(const ValidateOptions& opt);
void print_validation(const std::vector<ValidationRow>& rows, std::FILE* out);

struct BenchRow {
  std::string format, direction, dtype, variant;
  double bytes = 0, ms = 0, gbps = 0, of_copy = 0;
};
struct BenchOptions {
  int64_t elements = int64_t(1) << 29;  // 1 GiB of fp16 input (2 GiB of fp32)
  int reps = 50;
  int warmup = 5;
  std::string only;  // run formats whose spec contains this text
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
