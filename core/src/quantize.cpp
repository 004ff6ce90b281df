// CPU reference: quantize + pack for the plain and the Kitty-boost formats.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "dispatch.h"
#include "kvlab/pack.h"
#include "kvlab/quantizer.h"
#include "layout.h"

namespace kvlab {
namespace {

using detail::Layout;
using detail::to_float;

// First group whose scale or zero does not fit its storage type; reported after the loops.
struct Overflow {
  bool bad = false;
  int64_t n = 0, row = 0, group = 0;
  float mn = 0, mx = 0;
  void note(int64_t n_, int64_t r, int64_t g, float lo, float hi) {
#pragma omp critical(kvlab_overflow)
    if (!bad || n_ * 1000003 + r < n * 1000003 + row) bad = true, n = n_, row = r, group = g, mn = lo, mx = hi;
  }
};

bool fits(GroupParams p) { return std::isfinite(p.scale) && std::isfinite(p.zero); }

template <class Recipe, bool Sym>
GroupParams params_of(float mn, float mx, int bits, bool half) {
  if constexpr (Sym)
    return KvlabRecipe::sym_params(f_max(f_abs(mn), f_abs(mx)), sym_qmax(bits), half);
  else
    return Recipe::asym_params(mn, mx, asym_levels(bits), half);
}

template <class Recipe, bool Sym>
uint32_t code_of(float v, GroupParams p, int bits) {
  if constexpr (Sym)
    return KvlabRecipe::sym_code(v, p, sym_qmax(bits), bits);
  else
    return Recipe::asym_code(v, p, asym_levels(bits));
}

// Write n codes at code offset `first` of a zeroed row.
void pack_at(const uint8_t* codes, int64_t n, int bits, uint8_t* row, int64_t first) {
  if ((first * bits) % 8 == 0) {
    pack_row(codes, n, bits, row + first * bits / 8);
  } else {
    for (int64_t i = 0; i < n; ++i) put_code(row, first + i, bits, codes[i]);
  }
}

// axis=channel: a group is G tokens of one channel; rows are channels.
template <class Recipe, bool Sym, class In>
void quantize_channel(const In* x, const Layout& lo, bool half, QuantizedTensor& q, Overflow& of) {
  const int bits = lo.bits;
  const int64_t D = lo.D, G = lo.G;
  // Groups that end mid-byte share that byte with the next group: then one thread per slice.
  const bool byte_aligned = (G * bits) % 8 == 0;
#pragma omp parallel
  {
    std::vector<float> mn(D), mx(D);
    std::vector<GroupParams> par(D);
    std::vector<uint8_t> buf(D * G);
    auto group = [&](int64_t n, int64_t g) {
      const int64_t t0 = g * G, len = std::min(G, lo.T - t0);
      std::fill(mn.begin(), mn.end(), INFINITY);
      std::fill(mx.begin(), mx.end(), -INFINITY);
      for (int64_t t = t0; t < t0 + len; ++t) {
        const In* row = x + lo.elem(n, t, 0);
        for (int64_t c = 0; c < D; ++c) {
          const float v = Recipe::load(to_float(row[c]));
          mn[c] = f_min(mn[c], v);
          mx[c] = f_max(mx[c], v);
        }
      }
      for (int64_t c = 0; c < D; ++c) {
        par[c] = params_of<Recipe, Sym>(mn[c], mx[c], bits, half);
        if (!fits(par[c])) of.note(n, c, g, mn[c], mx[c]);
        const int64_t s = (n * D + c) * lo.groups + g;
        q.scale[s] = par[c].scale;
        if constexpr (!Sym) q.zero[s] = par[c].zero;
      }
      for (int64_t t = t0; t < t0 + len; ++t) {
        const In* row = x + lo.elem(n, t, 0);
        for (int64_t c = 0; c < D; ++c)
          buf[c * G + (t - t0)] = (uint8_t)code_of<Recipe, Sym>(Recipe::load(to_float(row[c])), par[c], bits);
      }
      for (int64_t c = 0; c < D; ++c)
        pack_at(&buf[c * G], len, bits, q.codes.data() + (n * D + c) * lo.row_bytes, t0);
    };
    if (byte_aligned) {
#pragma omp for schedule(static)
      for (int64_t w = 0; w < lo.N * lo.groups; ++w) group(w / lo.groups, w % lo.groups);
    } else {
#pragma omp for schedule(static)
      for (int64_t n = 0; n < lo.N; ++n)
        for (int64_t g = 0; g < lo.groups; ++g) group(n, g);
    }
  }
}

// axis=token: a group is G channels of one token; rows are tokens.
template <class Recipe, bool Sym, class In>
void quantize_token(const In* x, const Layout& lo, bool half, QuantizedTensor& q, Overflow& of) {
  const int bits = lo.bits;
  const int64_t D = lo.D, G = lo.G;
#pragma omp parallel
  {
    std::vector<uint8_t> buf(G);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < lo.N * lo.T; ++r) {
      const In* row = x + r * D;
      uint8_t* out = q.codes.data() + r * lo.row_bytes;
      for (int64_t g = 0; g < lo.groups; ++g) {
        const int64_t c0 = g * G, len = std::min(G, D - c0);
        float mn = INFINITY, mx = -INFINITY;
        for (int64_t c = c0; c < c0 + len; ++c) {
          const float v = Recipe::load(to_float(row[c]));
          mn = f_min(mn, v);
          mx = f_max(mx, v);
        }
        const GroupParams p = params_of<Recipe, Sym>(mn, mx, bits, half);
        if (!fits(p)) of.note(r / lo.T, r % lo.T, g, mn, mx);
        q.scale[r * lo.groups + g] = p.scale;
        if constexpr (!Sym) q.zero[r * lo.groups + g] = p.zero;
        for (int64_t c = c0; c < c0 + len; ++c)
          buf[c - c0] = (uint8_t)code_of<Recipe, Sym>(Recipe::load(to_float(row[c])), p, bits);
        pack_at(buf.data(), len, bits, out, c0);
      }
    }
  }
}

// Kitty key pages: per page of G tokens, the k channels of largest mean |x| get bits + 2.
template <class Recipe, class In>
void quantize_boost(const In* x, const Layout& lo, bool half, QuantizedTensor& q, Overflow& of) {
  const int bits = lo.bits;
  const int64_t D = lo.D, G = lo.G, k = lo.k;
  const uint32_t low_mask = (1u << bits) - 1u;
#pragma omp parallel
  {
    std::vector<float> mn(D), mx(D), score(D);
    std::vector<int> order(D), levels(D);
    std::vector<GroupParams> par(D);
    std::vector<uint8_t> low(D * G), high(std::max<int64_t>(k, 1) * G);
#pragma omp for schedule(static)
    for (int64_t w = 0; w < lo.N * lo.P; ++w) {
      const int64_t n = w / lo.P, p = w % lo.P, t0 = p * G, len = lo.page_tokens(p);
      std::fill(mn.begin(), mn.end(), INFINITY);
      std::fill(mx.begin(), mx.end(), -INFINITY);
      std::fill(score.begin(), score.end(), 0.0f);
      for (int64_t t = t0; t < t0 + len; ++t) {
        const In* row = x + lo.elem(n, t, 0);
        for (int64_t c = 0; c < D; ++c) {
          const float v = Recipe::load(to_float(row[c]));
          mn[c] = f_min(mn[c], v);
          mx[c] = f_max(mx[c], v);
          score[c] = f_add(score[c], f_abs(v));  // fp32, token order
        }
      }
      if constexpr (std::is_same_v<Recipe, KittySimRecipe>)
        for (int64_t c = 0; c < D; ++c) score[c] = Recipe::boost_score(score[c], (int)len);
      // Top k by score; equal scores go to the lower channel index.
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + k, order.end(),
                        [&](int a, int b) { return score[a] > score[b] || (score[a] == score[b] && a < b); });
      std::sort(order.begin(), order.begin() + k);  // slots in channel order
      uint8_t* index = q.boost_index.data() + w * D;
      std::fill(index, index + D, kNotBoosted);
      for (int64_t s = 0; s < k; ++s) index[order[s]] = (uint8_t)s;
      for (int64_t c = 0; c < D; ++c) {
        levels[c] = asym_levels(index[c] == kNotBoosted ? bits : boosted_bits(bits));
        par[c] = Recipe::asym_params(mn[c], mx[c], levels[c], half);
        if (!fits(par[c])) of.note(n, c, p, mn[c], mx[c]);
        q.scale[w * D + c] = par[c].scale;
        q.zero[w * D + c] = par[c].zero;
      }
      for (int64_t t = t0; t < t0 + len; ++t) {
        const In* row = x + lo.elem(n, t, 0);
        for (int64_t c = 0; c < D; ++c) {
          const uint32_t code = Recipe::asym_code(Recipe::load(to_float(row[c])), par[c], levels[c]);
          low[c * G + (t - t0)] = (uint8_t)(code & low_mask);
          if (index[c] != kNotBoosted) high[index[c] * G + (t - t0)] = (uint8_t)(code >> bits);
        }
      }
      uint8_t* low_page = q.codes.data() + n * lo.slice_low() + lo.page_low(p);
      uint8_t* high_page = q.high.data() + n * lo.slice_high() + lo.page_high(p);
      const int64_t low_row = packed_bytes(len, bits), high_row = packed_bytes(len, 2);
      for (int64_t c = 0; c < D; ++c) pack_row(&low[c * G], len, bits, low_page + c * low_row);
      for (int64_t s = 0; s < k; ++s) pack_row(&high[s * G], len, 2, high_page + s * high_row);
    }
  }
}

std::string axis_name(const QuantizerSpec& s) { return s.axis == Axis::Channel ? "token" : "channel"; }

void check_input(const TensorView& x, const QuantizerSpec& spec) {
  validate(spec);
  if (x.shape.size() < 2)
    throw std::invalid_argument("quantize: input of shape " + shape_string(x.shape) +
                                " needs at least 2 dims (..., T, D)");
  if (x.numel() == 0) throw std::invalid_argument("quantize: input of shape " + shape_string(x.shape) + " is empty");
  const int64_t T = x.shape[x.shape.size() - 2], D = x.shape.back();
  const int64_t axis_len = spec.axis == Axis::Channel ? T : D;
  if (spec.group > axis_len)
    throw std::invalid_argument("quantize: group=" + std::to_string(spec.group) + " is larger than the " +
                                axis_name(spec) + " axis it groups (" + std::to_string(axis_len) +
                                ") of input shape " + shape_string(x.shape));
  if (spec.boosted() && boost_count((int)D, spec.boost) > 254)
    throw std::invalid_argument("quantize: boost=" + std::to_string(spec.boost) + " of D=" + std::to_string(D) +
                                " channels boosts more than the 254 slots a uint8 index can name");
  check_finite(x, "quantize: input");
}

}  // namespace

QuantizedTensor quantize(const TensorView& x, const QuantizerSpec& spec) {
  check_input(x, spec);
  QuantizedTensor q;
  q.spec = spec;
  q.shape = x.shape;
  const int64_t axis_len = spec.axis == Axis::Channel ? q.tokens() : q.dims();
  q.group = spec.group == kWholeAxis ? (int)axis_len : spec.group;
  if (spec.boosted()) q.boost_k = boost_count((int)q.dims(), spec.boost);
  const Layout lo(q);
  const bool half = spec.params == ParamType::F16;
  const bool asym = spec.scheme == Scheme::Asym;
  if (spec.boosted()) {
    q.codes.assign(lo.N * lo.slice_low(), 0);
    q.high.assign(lo.N * lo.slice_high(), 0);
    q.boost_index.assign(lo.N * lo.P * lo.D, kNotBoosted);
    q.scale.assign(lo.N * lo.P * lo.D, 0.0f);
    q.zero.assign(lo.N * lo.P * lo.D, 0.0f);
  } else {
    q.codes.assign(lo.N * lo.R * lo.row_bytes, 0);
    q.scale.assign(lo.N * lo.R * lo.groups, 0.0f);
    if (asym) q.zero.assign(lo.N * lo.R * lo.groups, 0.0f);
  }
  Overflow of;
  detail::with_input(x, [&](const auto* in) {
    detail::with_recipe(spec.profile, [&](auto recipe) {
      using R = decltype(recipe);
      if (spec.boosted()) {
        if constexpr (!std::is_same_v<R, KiviRecipe>) quantize_boost<R>(in, lo, half, q, of);
      } else if (spec.axis == Axis::Channel) {
        if (asym) quantize_channel<R, false>(in, lo, half, q, of);
        else quantize_channel<KvlabRecipe, true>(in, lo, half, q, of);
      } else {
        if (asym) quantize_token<R, false>(in, lo, half, q, of);
        else quantize_token<KvlabRecipe, true>(in, lo, half, q, of);
      }
    });
  });
  if (of.bad)
    throw std::invalid_argument(
        "quantize: group " + std::to_string(of.group) + " of row " + std::to_string(of.row) + " in slice " +
        std::to_string(of.n) + " spans [" + std::to_string(of.mn) + ", " + std::to_string(of.mx) +
        "], whose scale or zero overflows " + (half || spec.profile != Profile::Kvlab ? "fp16" : "fp32") +
        " (spec " + to_string(spec) + "); use params=fp32 or more bits");
  return q;
}

}  // namespace kvlab
