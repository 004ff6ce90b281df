// Per-element arithmetic of each numerics profile ("one recipe, two compilers").
// The CPU reference and the CUDA kernels call exactly these functions; docs/FORMATS.md
// lists the operation order each one fixes.
#pragma once
#include <cstdint>

#include "kvlab/half.h"
#include "kvlab/hd.h"

namespace kvlab {

struct GroupParams {
  float scale;  // step between codes (stored value: fp16-representable when params are fp16)
  float zero;   // asym: value of code 0 (the group minimum); sym: 0
};

KV_HD int asym_levels(int bits) { return (1 << bits) - 1; }
KV_HD int sym_qmax(int bits) { return (1 << (bits - 1)) - 1; }

// kvlab (default): fp32, true division, round half to even, no contraction.
struct KvlabRecipe {
  KV_HD static float load(float x) { return x; }
  KV_HD static GroupParams asym_params(float mn, float mx, int levels, bool half_params) {
    const float s = f_div(f_sub(mx, mn), (float)levels);
    if (half_params) return {round_to_half(s), round_to_half(mn)};
    return {s, mn};
  }
  // Branch-free so loops over channels with different scales vectorize; a zero scale (constant
  // group, or a scale below fp16's range) selects code 0 before any conversion.
  KV_HD static uint32_t asym_code(float x, GroupParams p, int levels) {
    const float q = f_clamp(f_rint(f_div(f_sub(x, p.zero), p.scale)), 0.0f, (float)levels);
    return (uint32_t)(int32_t)(p.scale == 0.0f ? 0.0f : q);  // via int32: one cvt on every ISA
  }
  KV_HD static float asym_dequant(uint32_t code, GroupParams p) {
    return f_add(f_mul((float)code, p.scale), p.zero);
  }
  KV_HD static GroupParams sym_params(float absmax, int qmax, bool half_params) {
    const float s = f_div(absmax, (float)qmax);
    return {half_params ? round_to_half(s) : s, 0.0f};
  }
  // Two's complement code in `bits` bits.
  KV_HD static uint32_t sym_code(float x, GroupParams p, int qmax, int bits) {
    const float q = f_clamp(f_rint(f_div(x, p.scale)), -(float)qmax, (float)qmax);
    return (uint32_t)(int32_t)(p.scale == 0.0f ? 0.0f : q) & ((1u << bits) - 1u);
  }
  KV_HD static float sym_dequant(uint32_t code, GroupParams p, int bits) {
    const int32_t v = (int32_t)(code << (32 - bits)) >> (32 - bits);  // sign-extend
    return f_mul((float)v, p.scale);
  }
};

// Round a float result to fp16, as PyTorch does after each fp16 op on CUDA.
KV_HD float rh(float x) { return round_to_half(x); }

// torch's fp16 `(x - mn) / scale`, clamp to [0, max], round half to even, .to(int32);
// NaN (0/0 in a constant group) converts to 0 as CUDA's cvt does.
KV_HD uint32_t torch_half_code(float x, float mn, float scale, int levels) {
  const float q = rh(f_div(rh(f_sub(x, mn)), scale));
  if (q != q) return 0u;
  return (uint32_t)(int32_t)f_rint(f_clamp(q, 0.0f, (float)levels));
}
KV_HD float torch_half_dequant(uint32_t code, GroupParams p) {
  return rh(f_add(rh(f_mul((float)code, p.scale)), p.zero));
}

// kivi: jy-yuan/KIVI quant/new_pack.py on CUDA in fp16. scale = (mx - mn) / (2^b - 1), where
// torch divides a half tensor by a Python number as a multiply by the fp32 reciprocal.
struct KiviRecipe {
  KV_HD static float load(float x) { return rh(x); }
  KV_HD static GroupParams asym_params(float mn, float mx, int levels, bool) {
    const float inv = f_div(1.0f, (float)levels);
    return {rh(f_mul(rh(f_sub(mx, mn)), inv)), mn};
  }
  KV_HD static uint32_t asym_code(float x, GroupParams p, int levels) {
    return torch_half_code(x, p.zero, p.scale, levels);
  }
  KV_HD static float asym_dequant(uint32_t code, GroupParams p) { return torch_half_dequant(code, p); }
};

// kitty-sim: Summer-Summer/Kitty src/kitty_sim/utils_quant.py in fp16: the range is clamped
// to at least eps = 1e-4 (fp16 0x068E) before the reciprocal multiply.
struct KittySimRecipe {
  KV_HD static float load(float x) { return rh(x); }
  KV_HD static GroupParams asym_params(float mn, float mx, int levels, bool) {
    const float eps = half_to_float(0x068Eu);
    const float inv = f_div(1.0f, (float)levels);
    return {rh(f_mul(f_max(rh(f_sub(mx, mn)), eps), inv)), mn};
  }
  KV_HD static uint32_t asym_code(float x, GroupParams p, int levels) {
    return torch_half_code(x, p.zero, p.scale, levels);
  }
  KV_HD static float asym_dequant(uint32_t code, GroupParams p) { return torch_half_dequant(code, p); }
  // torch's fp16 mean(|x|) over a page: fp32 sum times fp32 1/n, rounded to fp16.
  KV_HD static float boost_score(float abs_sum, int n) { return rh(f_mul(abs_sum, f_div(1.0f, (float)n))); }
};

}  // namespace kvlab
