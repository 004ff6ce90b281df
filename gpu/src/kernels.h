// Device pointers of one packed tensor and the kernel launchers (C++17: nvcc compiles this next
// to core's shared headers; the host API in api.cpp fills them from a QuantizerSpec).
#pragma once
#include <cstdint>

#include <cuda_runtime.h>

#include "kvlab/float_format.h"
#include "kvlab/layout.h"
#include "kvlab_gpu/kernel_config.h"

namespace kvlab::gpu {

// The packed geometry is core's PackedLayout (kvlab/layout.h): one description for the CPU
// reference and the kernels. A GPU format is that struct plus the device pointers below.
using DevFormat = PackedLayout;

struct DevQuant {
  uint8_t* codes = nullptr;  // plain codes or boost low plane
  void* scale = nullptr;     // fp16 bits or fp32, per half_params
  void* zero = nullptr;      // null for sym
  uint8_t* high = nullptr;   // boost
  uint8_t* index = nullptr;  // boost
  int* overflow = nullptr;   // set non-zero when a scale or zero is not finite in its storage
};

enum class InType { F16, F32 };
enum class OutType { F32, F16, Codes };

// Each returns the kernel path that ran ("regs", "tile", "two-pass", ...) for the tables.
const char* quantize_channel(const DevFormat& f, const void* x, InType in, DevQuant q, cudaStream_t s,
                             const KernelConfig& cfg);
// Long per-channel groups in one read (quant_channel_cluster.cu); nullptr where cfg or the
// shape leaves them to the two-pass path. PRE: quantize_channel's register-tile conditions.
const char* quantize_channel_cluster(const DevFormat& f, const void* x, InType in, DevQuant q, cudaStream_t s,
                                     const KernelConfig& cfg);
const char* quantize_token(const DevFormat& f, const void* x, InType in, DevQuant q, cudaStream_t s,
                           const KernelConfig& cfg);
const char* quantize_boost(const DevFormat& f, const void* x, InType in, DevQuant q, cudaStream_t s,
                           const KernelConfig& cfg);
const char* dequantize_channel(const DevFormat& f, DevQuant q, void* out, OutType o, cudaStream_t s,
                               const KernelConfig& cfg);
const char* dequantize_token(const DevFormat& f, DevQuant q, void* out, OutType o, cudaStream_t s,
                             const KernelConfig& cfg);
const char* dequantize_boost(const DevFormat& f, DevQuant q, void* out, OutType o, cudaStream_t s,
                             const KernelConfig& cfg);

// Scaled floating-point formats (quant_float.cu; core's float_format.h recipe): device arrays.
struct DevFloat {
  uint8_t* codes = nullptr;        // FloatLayout::codes_bytes()
  float* scale = nullptr;          // n_scales() fp32 values (room for at least one)
  uint8_t* block_scale = nullptr;  // fp4: block_scale_bytes()
};
// The dynamic scales of x (fp8: per group from the absmax; NVFP4: the tensor scale) into q.scale.
void float_scales(const FloatLayout& L, const void* x, InType in, DevFloat q, cudaStream_t s);
// Codes (and fp4 block scales) of x with the scales already in q.scale. Returns the kernel path.
// cfg.fast_div: FP4's fast code step (quant_float.cu); false: the recipe per element.
const char* quantize_float(const FloatLayout& L, const void* x, InType in, DevFloat q, cudaStream_t s,
                           const KernelConfig& cfg = {});
// out: fp32 or fp16 (the fp32 value rounded), as core's dequantize_float(_half).
const char* dequantize_float(const FloatLayout& L, DevFloat q, void* out, OutType o, cudaStream_t s);
// fp8 conversions: hardware vs minifloat.h's integer code on every fp16 value (through the
// float and the paired f16x2 instruction) and on all 2^32 floats but NaN, plus decoding of all
// 256 codes of each format, singly and as the dequantize's pairs (all 2^16 pairs). Returns
// mismatches; *checked = conversions compared.
int64_t fp8_conversion_mismatches(int64_t* checked);
// FP4's fast code step vs the recipe (quant_float.cu's fp4_code_check says on what).
int64_t fp4_code_mismatches(int64_t* checked);

// Token lanes per channel chunk of the register-tile dequantize kernels (channel, Kitty), as
// log2: 2 lanes. 1 and 4 lanes are the runner-ups of gpu/dev/dequant_token_lanes.cu.
constexpr int kDequantTokenLanesLog2 = 1;

// Largest dynamic shared memory a tile kernel asks for.
constexpr int kMaxTileSmem = 160 * 1024;

}  // namespace kvlab::gpu
