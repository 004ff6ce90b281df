// Device-side description of one packed format and the kernel launchers (C++17: nvcc compiles
// this next to core's shared headers; the host API in api.cpp fills it from a QuantizerSpec).
#pragma once
#include <cstdint>

#include <cuda_runtime.h>

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

// Each returns the kernel variant that ran ("tile", "two-pass", ...) for the tables.
const char* quantize_channel(const DevFormat& f, const void* x, InType in, DevQuant q, cudaStream_t s);
const char* quantize_token(const DevFormat& f, const void* x, InType in, DevQuant q, cudaStream_t s);
const char* quantize_boost(const DevFormat& f, const void* x, InType in, DevQuant q, cudaStream_t s);
const char* dequantize_channel(const DevFormat& f, DevQuant q, void* out, OutType o, cudaStream_t s);
const char* dequantize_token(const DevFormat& f, DevQuant q, void* out, OutType o, cudaStream_t s);
const char* dequantize_boost(const DevFormat& f, DevQuant q, void* out, OutType o, cudaStream_t s);

// Kernel choices, process-wide (bench runs variants side by side; validate checks each).
// Defaults are the fastest validated kernels.
struct Tuning {
  int v4 =
      1;  // 1: v4 kernels (token 16/lane, channel register tiles, Kitty v3, vector dequant); 0: v3 kernels
  int fastdiv = 1;  // v4 kernels: reciprocal + Markstein quotient (fastq.cuh); 0: the recipe's IEEE division
  int minmax = 1;   // v4 kernels: hardware min/max (FMNMX, HMNMX2); 0: order keys
  int tok_v = 0;    // v4 per-token quantize: elements per lane (0: 32 where the groups allow, else 16)
  int deq_tcl = 2;  // v4 per-channel / Kitty dequantize: token-chunk lanes per channel chunk (1, 2, 4, 8)
  int ldg = 1;      // v4 per-token quantize: L1-allocating loads (__ldg); 0: streaming (__ldcs)
  int kitty_perm =
      0;  // Kitty v3 quantize: codes in non-boosted-then-boosted channel order (1) or channel order (0)
};
Tuning& tuning();

// Largest dynamic shared memory a tile kernel asks for.
constexpr int kMaxTileSmem = 160 * 1024;

}  // namespace kvlab::gpu
