// Which GPU kernels run, as an explicit value: gpu::quantize / dequantize take a KernelConfig
// and pass it down to the launchers (no process-wide state). kKernelVariants is the one list
// of named configurations: help text, `validate` (checks every one), `bench` (times them side
// by side) and tests/gpu iterate it. C++17 (the .cu files include it).
#pragma once

namespace kvlab::gpu {

struct KernelConfig {
  // Register-tile kernels where the shape allows them (else the tile / vec / warp / page
  // kernels, which every shape can take). false: the tile / vec / warp / page kernels on every
  // shape, so validate checks them on all data, not only on the shapes that need them.
  bool fast_kernels = true;
  // Register-tile and radix-page quantize: reciprocal + Markstein quotient (fastq.cuh); FP4
  // quantize: that quotient (exact reciprocal for MXFP4) and a float-trick E2M1 rounding
  // (quant_float.cu). false: the recipe's per-element IEEE division (and E2M1 encoding).
  bool fast_div = true;
  // Register-tile and radix-page quantize: hardware min/max (FMNMX, HMNMX2); false: order keys.
  bool hw_minmax = true;
  // Per-channel groups too long for one register tile (whole-axis INT8): one DRAM read by a
  // cluster of CTAs per group (quant_channel_cluster.cu); false: two passes over the input.
  bool single_read = true;
  // That cluster kernel holds each CTA's range in shared memory where it fits (64 KB for a
  // 4096-token group); false: the range is re-read from L2 (the L2 rule below).
  bool cluster_smem = true;
  // Bytes per row of the shared-memory cluster kernel's tile: 128 (256 threads, 3 CTAs per SM on a
  // 4096-token group) or 64 (half the channels: 128 threads, half the shared memory, 6 CTAs per
  // SM); 0 = by input type, 64 for fp16 and 128 for fp32 (the faster of the two on the H100 for each).
  int cluster_row_bytes = 0;
  // CTAs per SM of the L2 cluster kernel: 0 = by its L2 rule, 1 or 2 forced (bench A/B).
  int cluster_ctas_per_sm = 0;
  // Kitty radix pages: statistics by channel pairs (one load and, for fp16, HMNMX2 per pair),
  // codes with one channel per thread, top-k two radix bits per round; false: the previous
  // kernel (one channel per thread in the statistics, codes by unit index, one bit per round).
  bool boost_pairs = true;
  // Kitty pages of 128 x 128: cp.async into a swizzled tile, codes stored straight from registers
  // (no staged rows), both planes from biased-code sums; false: boost_pairs's staged kernel.
  bool boost_direct = true;
};

// What a variant changes, as bit masks (a variant that changes nothing else needs no rows).
enum KernelDirection : unsigned { kQuantize = 1u, kDequantize = 2u };
enum KernelLayout : unsigned { kChannel = 1u, kToken = 2u, kBoost = 4u };

struct KernelVariant {
  const char* name;     // --preset NAME
  const char* alias;    // the former preset name, still accepted
  KernelConfig config;  //
  unsigned directions;  // KernelDirection bits whose kernels differ from the default
  unsigned layouts;     // KernelLayout bits whose kernels differ from the default
  const char* note;     // one line for help text
};

namespace variant_configs {
constexpr KernelConfig fallback_kernels() {
  KernelConfig c;
  c.fast_kernels = false;
  return c;
}
constexpr KernelConfig ieee_division() {
  KernelConfig c;
  c.fast_div = false;
  return c;
}
constexpr KernelConfig two_pass() {
  KernelConfig c;
  c.single_read = false;
  return c;
}
constexpr KernelConfig cluster_ctas(int n) {
  KernelConfig c;
  c.cluster_smem = false;
  c.cluster_ctas_per_sm = n;
  return c;
}
constexpr KernelConfig cluster_rows(int bytes) {
  KernelConfig c;
  c.cluster_row_bytes = bytes;
  return c;
}
constexpr KernelConfig boost_single() {
  KernelConfig c;
  c.boost_pairs = false;
  return c;
}
constexpr KernelConfig boost_staged() {
  KernelConfig c;
  c.boost_direct = false;
  return c;
}
constexpr KernelConfig order_key_minmax() {
  KernelConfig c;
  c.hw_minmax = false;
  return c;
}
}  // namespace variant_configs

// The first entry is the default. Runner-up shapes that lost on the H200 (token quantize with
// streaming loads or 16 per lane for fp16, dequantize with 1 or 4 token lanes, Kitty codes in
// grouped channel order) live in gpu/dev/, each with its own validate and bench.
// clang-format off
inline constexpr KernelVariant kKernelVariants[] = {
  {"default",          "v4",      KernelConfig{},                       kQuantize | kDequantize, kChannel | kToken | kBoost,
   "fastest validated kernels: register tiles, Markstein quotient, hardware min/max"},
  {"ieee-div",         "v4-ieee", variant_configs::ieee_division(),     kQuantize,               kChannel | kToken | kBoost,
   "default kernels with the recipe's IEEE division: proves the fast quotient gives the same bytes"},
  {"order-key-minmax", "v4-keys", variant_configs::order_key_minmax(),  kQuantize,               kChannel | kToken | kBoost,
   "default kernels with order-key min/max: proves FMNMX/HMNMX2 give the same bytes"},
  {"two-pass",         "two-pass",    variant_configs::two_pass(),          kQuantize,               kChannel,
   "long per-channel groups in two reads (stats, then codes): the single-read cluster kernel's predecessor"},
  {"cluster-narrow",   "cluster-narrow", variant_configs::cluster_rows(64),  kQuantize,               kChannel,
   "shared-memory cluster kernel on 64-byte rows for both input types: 128 threads, 6 CTAs per SM (bench A/B)"},
  {"cluster-wide",     "cluster-wide",   variant_configs::cluster_rows(128), kQuantize,               kChannel,
   "shared-memory cluster kernel on 128-byte rows for both input types: 256 threads, 3 CTAs per SM (bench A/B)"},
  {"cluster-l2",       "cluster-l2",  variant_configs::cluster_ctas(0),     kQuantize,               kChannel,
   "single-read cluster kernel re-reading its range from L2, by its L2 rule (the shared-memory kernel's predecessor)"},
  {"cluster-1",        "cluster-1",   variant_configs::cluster_ctas(1),     kQuantize,               kChannel,
   "single-read cluster kernel at 1 CTA per SM (bench A/B of its L2 rule)"},
  {"cluster-2",        "cluster-2",   variant_configs::cluster_ctas(2),     kQuantize,               kChannel,
   "single-read cluster kernel at 2 CTAs per SM (bench A/B of its L2 rule)"},
  {"boost-single",     "boost-single", variant_configs::boost_single(),      kQuantize,               kBoost,
   "the previous Kitty radix kernel: statistics by one channel per thread, codes by unit index, one radix bit per round"},
  {"boost-staged",     "boost-staged", variant_configs::boost_staged(),      kQuantize,               kBoost,
   "the previous Kitty 128 x 128 page kernel: codes staged in shared memory, then copied out"},
  {"fallback",         "v3",      variant_configs::fallback_kernels(),  kQuantize | kDequantize, kChannel | kToken | kBoost,
   "tile/vec/warp/page kernels on every shape (what odd shapes run); the run-4 kernels"},
};
// clang-format on

}  // namespace kvlab::gpu
