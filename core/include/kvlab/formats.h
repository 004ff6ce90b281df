// The table of packed formats kvlab sweeps: every test sweep, `kvlab gpu validate` and
// `kvlab gpu bench` iterate this one list (as ggml's type-traits table drives its types).
// A format is a quantizer spec (spec.h); `gpu` says whether CUDA kernels reproduce it (the
// kvlab profile only), `bench` whether `kvlab gpu bench` times it.
#pragma once

namespace kvlab {

struct FormatEntry {
  const char* name;  // short handle for tables and --only filters
  const char* spec;  // canonical quantizer spec (parse_quantizer(spec) round-trips)
  bool gpu;          // CUDA kernels exist (validated byte for byte)
  bool bench;        // timed by `kvlab gpu bench`
  const char* note;  // what the format is, in a few words
};

// clang-format off
inline constexpr FormatEntry kFormats[] = {
  // name                 spec                                                                         gpu    bench  note
  {"int8-ch",            "scheme=sym,bits=8,axis=channel,group=all,params=fp32,profile=kvlab",            true,  true,  "INT8 per channel, absmax/127"},
  {"int8-ch-g32-f16",    "scheme=sym,bits=8,axis=channel,group=32,params=fp16,profile=kvlab",             true,  false, "INT8 per channel, groups of 32 tokens"},
  {"int8-ch-g128",       "scheme=sym,bits=8,axis=channel,group=128,params=fp32,profile=kvlab",            true,  true,  "INT8 per channel, groups of 128 tokens"},
  {"int8-tok",           "scheme=sym,bits=8,axis=token,group=all,params=fp32,profile=kvlab",              true,  false, "INT8 per token"},
  {"k2-ch-g32",          "scheme=asym,bits=2,axis=channel,group=32,params=fp16,profile=kvlab",            true,  false, "2-bit keys per channel, G=32"},
  {"k2-ch-g128",         "scheme=asym,bits=2,axis=channel,group=128,params=fp16,profile=kvlab",           true,  true,  "KIVI-2 keys: per channel, G=128"},
  {"k3-ch",              "scheme=asym,bits=3,axis=channel,group=all,params=fp32,profile=kvlab",           true,  false, "3-bit keys, groups across byte boundaries"},
  {"k4-ch-g32-f32",      "scheme=asym,bits=4,axis=channel,group=32,params=fp32,profile=kvlab",            true,  false, "4-bit keys per channel, G=32, fp32 params"},
  {"k4-ch-g128",         "scheme=asym,bits=4,axis=channel,group=128,params=fp16,profile=kvlab",           true,  true,  "KIVI-4 keys: per channel, G=128"},
  {"k4-ch-g128-f32",     "scheme=asym,bits=4,axis=channel,group=128,params=fp32,profile=kvlab",           true,  false, "4-bit keys per channel, G=128, fp32 params"},
  {"a8-ch",              "scheme=asym,bits=8,axis=channel,group=all,params=fp16,profile=kvlab",           true,  false, "8-bit asymmetric per channel"},
  {"a8-ch-g128-f32",     "scheme=asym,bits=8,axis=channel,group=128,params=fp32,profile=kvlab",           true,  true,  "8-bit asymmetric per channel, G=128"},
  {"v2-tok-g32",         "scheme=asym,bits=2,axis=token,group=32,params=fp16,profile=kvlab",              true,  false, "2-bit values per token, groups of 32 channels"},
  {"v2-tok-g128",        "scheme=asym,bits=2,axis=token,group=128,params=fp16,profile=kvlab",             true,  true,  "KIVI-2 values: per token"},
  {"v4-tok-g32",         "scheme=asym,bits=4,axis=token,group=32,params=fp16,profile=kvlab",              true,  true,  "4-bit values per token, groups of 32 channels"},
  {"v4-tok-f32",         "scheme=asym,bits=4,axis=token,group=all,params=fp32,profile=kvlab",             true,  false, "4-bit values per token, fp32 params"},
  {"v8-tok-g32",         "scheme=asym,bits=8,axis=token,group=32,params=fp16,profile=kvlab",              true,  false, "8-bit values per token, groups of 32"},
  {"v8-tok-g128-f32",    "scheme=asym,bits=8,axis=token,group=128,params=fp32,profile=kvlab",             true,  true,  "8-bit values per token, fp32 params"},
  {"kitty-k2-g32",       "scheme=asym,bits=2,axis=channel,group=32,params=fp16,profile=kvlab,boost=0.125",  true,  false, "Kitty pages of 32, 12.5% of channels at 4 bits"},
  {"kitty-k4-g32-f32",   "scheme=asym,bits=4,axis=channel,group=32,params=fp32,profile=kvlab,boost=0.25",   true,  false, "Kitty pages of 32, 25% of channels at 6 bits"},
  {"kitty-k2-g128",      "scheme=asym,bits=2,axis=channel,group=128,params=fp16,profile=kvlab,boost=0.125", true,  true,  "Kitty keys: pages of 128, 12.5% at 4 bits"},
  {"kitty-k4-g128",      "scheme=asym,bits=4,axis=channel,group=128,params=fp16,profile=kvlab,boost=0.125", true,  true,  "Kitty 4-bit keys, 12.5% at 6 bits"},
  {"kivi-k2-upstream",   "scheme=asym,bits=2,axis=channel,group=128,params=fp16,profile=kivi",            false, false, "KIVI's fp16 PyTorch arithmetic, keys"},
  {"kivi-v2-upstream",   "scheme=asym,bits=2,axis=token,group=128,params=fp16,profile=kivi",              false, false, "KIVI's fp16 PyTorch arithmetic, values"},
  {"kitty-k2-upstream",  "scheme=asym,bits=2,axis=channel,group=128,params=fp16,profile=kitty-sim,boost=0.125", false, false, "Kitty's simulated fp16 arithmetic"},
};
// clang-format on

// The scaled floating-point formats (float_quant.h, docs/FORMATS.md section 8): the same row
// type, with a float format spec (parse_float_spec round-trips it); validate and bench iterate
// it after kFormats.
// clang-format off
inline constexpr FormatEntry kFloatFormats[] = {
  // name             spec                        gpu    bench  note
  {"fp8-e4m3-head",   "fmt=e4m3,scale=head",      true,  true,  "FP8 E4M3, fp32 absmax scale per head (hardware cvt)"},
  {"fp8-e4m3-tensor", "fmt=e4m3,scale=tensor",    true,  false, "FP8 E4M3, one fp32 scale per tensor"},
  {"fp8-e4m3-ch",     "fmt=e4m3,scale=channel",   true,  true,  "FP8 E4M3, fp32 scale per (head, channel)"},
  {"fp8-e5m2-head",   "fmt=e5m2,scale=head",      true,  true,  "FP8 E5M2, fp32 absmax scale per head"},
  {"fp8-e5m2-ch",     "fmt=e5m2,scale=channel",   true,  false, "FP8 E5M2, fp32 scale per (head, channel)"},
  {"nvfp4",           "fmt=nvfp4",                true,  true,  "NVFP4: E2M1, E4M3 scale per 16, fp32 tensor scale"},
  {"mxfp4",           "fmt=mxfp4",                true,  true,  "MXFP4 (OCP MX v1.0): E2M1, E8M0 scale per 32"},
};
// clang-format on

}  // namespace kvlab
