// Device pointers of one packed tensor and the kernel launchers (C++17: nvcc compiles this next
// to core's shared headers; the host API in api.cpp fills them from a QuantizerSpec).
#pragma once
#include <cstdint>

#include <cuda_runtime.h>

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

// Token lanes per channel chunk of the register-tile dequantize kernels (channel, Kitty), as
// log2: 2 lanes. 1 and 4 lanes are the runner-ups of gpu/dev/dequant_token_lanes.cu.
constexpr int kDequantTokenLanesLog2 = 1;

// Largest dynamic shared memory a tile kernel asks for.
constexpr int kMaxTileSmem = 160 * 1024;

}  // namespace kvlab::gpu
