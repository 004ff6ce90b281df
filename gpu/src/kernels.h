// Device-side description of one packed format and the kernel launchers (C++17: nvcc compiles
// this next to core's shared headers; the host API in api.cpp fills it from a QuantizerSpec).
#pragma once
#include <cstdint>

#include <cuda_runtime.h>

#include "kvlab_gpu/kernel_config.h"

#if defined(__CUDACC__)
#define KVG_HD __host__ __device__
#else
#define KVG_HD
#endif

namespace kvlab::gpu {

struct DevFormat {
  int64_t N = 0, T = 0, D = 0;  // slices, tokens, channels
  int G = 0;                    // resolved group (boost: page tokens)
  int bits = 0;
  int sym = 0;            // scheme=sym (no zero array)
  int channel = 1;        // axis=channel
  int half_params = 0;    // scale/zero stored as fp16 bits (else fp32)
  int boost = 0;          // Kitty key pages
  int k = 0;              // boosted channels per page
  int64_t groups = 0;     // groups per row (plain); pages (boost)
  int64_t row_bytes = 0;  // plain: packed bytes per row
  KVG_HD int64_t rows() const { return channel ? D : T; }
  // boost pages
  KVG_HD int64_t last() const { return T - (groups - 1) * G; }
  KVG_HD int64_t page_tokens(int64_t p) const { return p + 1 < groups ? G : last(); }
  KVG_HD int64_t nb(int64_t len, int b) const { return (len * b + 7) / 8; }
  KVG_HD int64_t slice_low() const { return (groups - 1) * D * nb(G, bits) + D * nb(last(), bits); }
  KVG_HD int64_t slice_high() const { return (groups - 1) * k * nb(G, 2) + k * nb(last(), 2); }
  // element counts of each array
  int64_t codes_bytes() const { return boost ? N * slice_low() : N * rows() * row_bytes; }
  int64_t high_bytes() const { return boost ? N * slice_high() : 0; }
  int64_t index_bytes() const { return boost ? N * groups * D : 0; }
  int64_t n_params() const { return boost ? N * groups * D : N * rows() * groups; }
  int64_t param_size() const { return half_params ? 2 : 4; }
  bool has_zero() const { return !sym; }
};

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
