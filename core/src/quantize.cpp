// CPU reference: quantize + pack for the plain and the Kitty-boost formats.
// Loops work on token-major tiles so the per-element recipe calls vectorize across channels.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "dispatch.h"
#include "kvlab/layout.h"
#include "kvlab/pack.h"
#include "kvlab/quantizer.h"
#include "tiles.h"

namespace kvlab {
namespace {

using Layout = PackedLayout;

// First group whose scale or zero does not fit its storage type; reported after the loops.
struct Overflow {
  bool bad = false;
  int64_t n = 0, row = 0, group = 0;
  float mn = 0, mx = 0;
  void note(int64_t n_, int64_t r, int64_t g, float lo, float hi) {
#pragma omp critical(kvlab_overflow)
    if (!bad || n_ * 1000003 + r < n * 1000003 + row) {
      bad = true;
      n = n_;
      row = r;
      group = g;
      mn = lo;
      mx = hi;
    }
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

// Convert n input elements to floats and apply the profile's input rounding.
template <class Recipe, class In>
void load(const In* in, float* out, int64_t n) {
  detail::load_floats(in, out, n);
  if constexpr (!std::is_same_v<Recipe, KvlabRecipe>)
    for (int64_t i = 0; i < n; ++i) out[i] = Recipe::load(out[i]);
}

// Per-channel min and max over `len` token rows of a [len][D] tile.
void column_minmax(const float* __restrict tile, int64_t len, int64_t D, float* __restrict mn,
                   float* __restrict mx) {
  std::fill(mn, mn + D, INFINITY);
  std::fill(mx, mx + D, -INFINITY);
  for (int64_t t = 0; t < len; ++t)
    for (int64_t c = 0; c < D; ++c) {
      mn[c] = f_min(mn[c], tile[t * D + c]);
      mx[c] = f_max(mx[c], tile[t * D + c]);
    }
}

// Codes of n elements, each with its own group parameters (the channels of one token row).
template <class Recipe, bool Sym>
void codes_per_channel(const float* __restrict x, const float* __restrict scale, const float* __restrict zero,
                       int64_t n, int bits, uint8_t* __restrict out) {
  for (int64_t c = 0; c < n; ++c)
    out[c] = (uint8_t)code_of<Recipe, Sym>(x[c], GroupParams{scale[c], zero[c]}, bits);
}

// Codes of n elements sharing one group's parameters.
template <class Recipe, bool Sym>
void codes_per_group(const float* __restrict x, GroupParams p, int64_t n, int bits, uint8_t* __restrict out) {
  for (int64_t c = 0; c < n; ++c) out[c] = (uint8_t)code_of<Recipe, Sym>(x[c], p, bits);
}

// Codes of one token row of a Kitty page: each channel with its own parameters and levels.
template <class Recipe>
void boost_codes(const float* __restrict x, const float* __restrict scale, const float* __restrict zero,
                 const int* __restrict levels, int64_t n, uint8_t* __restrict out) {
  for (int64_t c = 0; c < n; ++c)
    out[c] = (uint8_t)Recipe::asym_code(x[c], GroupParams{scale[c], zero[c]}, levels[c]);
}

// Scratch of one thread for one group or page.
struct Scratch {
  std::vector<float> tile, mn, mx, scale, zero, score;
  std::vector<uint8_t> codes, packed;
  Scratch(int64_t G, int64_t D)
      : tile(G * D), mn(D), mx(D), scale(D), zero(D), score(D), codes(G * D), packed(G * D + D) {}
};

// axis=channel: a group is G tokens of one channel; rows are channels. Groups are read in
// chunks of kChunk tokens (twice: min/max, then codes) so a whole-axis group stays in cache.
constexpr int64_t kChunk = 128;  // a multiple of 8: chunks start on byte boundaries for any width

template <class Recipe, bool Sym, class In>
void quantize_channel(const In* x, const Layout& lo, bool half, QuantizedTensor& q, Overflow& of) {
  const int bits = lo.bits;
  const int64_t D = lo.D, G = lo.G;
  // Groups that end mid-byte share that byte with the next group: then one thread per slice.
  const bool byte_aligned = (G * bits) % 8 == 0;
#pragma omp parallel
  {
    Scratch s(std::min(G, kChunk), D);
    std::vector<float> cmn(D), cmx(D);
    auto group = [&](int64_t n, int64_t g) {
      const int64_t t0 = g * G, len = std::min(G, lo.T - t0);
      std::fill(s.mn.begin(), s.mn.end(), INFINITY);
      std::fill(s.mx.begin(), s.mx.end(), -INFINITY);
      for (int64_t c0 = 0; c0 < len; c0 += kChunk) {
        const int64_t cl = std::min(kChunk, len - c0);
        load<Recipe>(x + lo.elem(n, t0 + c0, 0), s.tile.data(), cl * D);
        column_minmax(s.tile.data(), cl, D, cmn.data(), cmx.data());
        for (int64_t c = 0; c < D; ++c) {
          s.mn[c] = f_min(s.mn[c], cmn[c]);
          s.mx[c] = f_max(s.mx[c], cmx[c]);
        }
      }
      for (int64_t c = 0; c < D; ++c) {
        const GroupParams p = params_of<Recipe, Sym>(s.mn[c], s.mx[c], bits, half);
        if (!fits(p)) of.note(n, c, g, s.mn[c], s.mx[c]);
        s.scale[c] = p.scale;
        s.zero[c] = p.zero;
        const int64_t at = (n * D + c) * lo.groups + g;
        q.scale[at] = p.scale;
        if constexpr (!Sym) q.zero[at] = p.zero;
      }
      for (int64_t c0 = 0; c0 < len; c0 += kChunk) {
        const int64_t cl = std::min(kChunk, len - c0);
        if (len > kChunk) load<Recipe>(x + lo.elem(n, t0 + c0, 0), s.tile.data(), cl * D);
        for (int64_t t = 0; t < cl; ++t)
          codes_per_channel<Recipe, Sym>(&s.tile[t * D], s.scale.data(), s.zero.data(), D, bits,
                                         &s.codes[t * D]);
        detail::pack_tile(s.codes.data(), cl, D, bits, q.codes.data() + n * D * lo.row_bytes, lo.row_bytes,
                          t0 + c0, s.packed.data());
      }
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

// Min and max of n elements, in 16 lanes (the order does not matter: see f_min in hd.h).
void row_minmax(const float* __restrict x, int64_t n, float& mn, float& mx) {
  float lmn[16], lmx[16];
  for (int j = 0; j < 16; ++j) {
    lmn[j] = INFINITY;
    lmx[j] = -INFINITY;
  }
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j) {
      lmn[j] = f_min(lmn[j], x[i + j]);
      lmx[j] = f_max(lmx[j], x[i + j]);
    }
  for (; i < n; ++i) {
    lmn[0] = f_min(lmn[0], x[i]);
    lmx[0] = f_max(lmx[0], x[i]);
  }
  mn = INFINITY;
  mx = -INFINITY;
  for (int j = 0; j < 16; ++j) {
    mn = f_min(mn, lmn[j]);
    mx = f_max(mx, lmx[j]);
  }
}

// axis=token: a group is G channels of one token; rows are tokens.
template <class Recipe, bool Sym, class In>
void quantize_token(const In* x, const Layout& lo, bool half, QuantizedTensor& q, Overflow& of) {
  const int bits = lo.bits;
  const int64_t D = lo.D, G = lo.G;
#pragma omp parallel
  {
    std::vector<float> row(D);
    std::vector<uint8_t> codes(D);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < lo.N * lo.T; ++r) {
      load<Recipe>(x + r * D, row.data(), D);
      for (int64_t g = 0; g < lo.groups; ++g) {
        const int64_t c0 = g * G, len = std::min(G, D - c0);
        float mn, mx;
        row_minmax(&row[c0], len, mn, mx);
        const GroupParams p = params_of<Recipe, Sym>(mn, mx, bits, half);
        if (!fits(p)) of.note(r / lo.T, r % lo.T, g, mn, mx);
        q.scale[r * lo.groups + g] = p.scale;
        if constexpr (!Sym) q.zero[r * lo.groups + g] = p.zero;
        codes_per_group<Recipe, Sym>(&row[c0], p, len, bits, &codes[c0]);
      }
      pack_row(codes.data(), D, bits, q.codes.data() + r * lo.row_bytes);
    }
  }
}

// Kitty key pages: per page of G tokens, the k channels of largest mean |x| get bits + 2.
// `chosen`: null (rank by score) or the caller's k channels per (slice, page), row w = n * P + p.
template <class Recipe, class In>
void quantize_boost(const In* x, const Layout& lo, bool half, QuantizedTensor& q, Overflow& of,
                    const int32_t* chosen) {
  const int bits = lo.bits;
  const int64_t D = lo.D, G = lo.G, k = lo.k;
  const uint32_t low_mask = (1u << bits) - 1u;
#pragma omp parallel
  {
    Scratch s(G, D);
    std::vector<int> order(D), levels(D);  // levels: 2^bits - 1, or 2^(bits+2) - 1 if boosted
    std::vector<uint8_t> high(std::max<int64_t>(k, 1) * G), low(G * D);
#pragma omp for schedule(static)
    for (int64_t w = 0; w < lo.N * lo.groups; ++w) {
      const int64_t n = w / lo.groups, p = w % lo.groups, t0 = p * G, len = lo.page_tokens(p);
      load<Recipe>(x + lo.elem(n, t0, 0), s.tile.data(), len * D);
      column_minmax(s.tile.data(), len, D, s.mn.data(), s.mx.data());
      if (chosen) {
        std::copy_n(chosen + w * k, k, order.begin());
      } else {
        std::fill(s.score.begin(), s.score.end(), 0.0f);
        for (int64_t t = 0; t < len; ++t)  // fp32 sums of |x| in token order
          for (int64_t c = 0; c < D; ++c) s.score[c] = f_add(s.score[c], f_abs(s.tile[t * D + c]));
        if constexpr (std::is_same_v<Recipe, KittySimRecipe>)
          for (int64_t c = 0; c < D; ++c) s.score[c] = Recipe::boost_score(s.score[c], (int)len);
        // Top k by score; equal scores go to the lower channel index.
        std::iota(order.begin(), order.end(), 0);
        std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int a, int b) {
          return s.score[a] > s.score[b] || (s.score[a] == s.score[b] && a < b);
        });
      }
      std::sort(order.begin(), order.begin() + k);  // slots in channel order
      uint8_t* index = q.boost_index.data() + w * D;
      std::fill(index, index + D, kNotBoosted);
      for (int64_t i = 0; i < k; ++i) index[order[i]] = (uint8_t)i;
      for (int64_t c = 0; c < D; ++c) {
        levels[c] = asym_levels(index[c] == kNotBoosted ? bits : boosted_bits(bits));
        const GroupParams pc = Recipe::asym_params(s.mn[c], s.mx[c], levels[c], half);
        if (!fits(pc)) of.note(n, c, p, s.mn[c], s.mx[c]);
        s.scale[c] = q.scale[w * D + c] = pc.scale;
        s.zero[c] = q.zero[w * D + c] = pc.zero;
      }
      // Full codes first (vectorizes across channels), then split into the two planes.
      for (int64_t t = 0; t < len; ++t)
        boost_codes<Recipe>(&s.tile[t * D], s.scale.data(), s.zero.data(), levels.data(), D, &s.codes[t * D]);
      for (int64_t i = 0; i < len * D; ++i) low[i] = (uint8_t)(s.codes[i] & low_mask);
      for (int64_t c = 0; c < D; ++c)
        if (index[c] != kNotBoosted)
          for (int64_t t = 0; t < len; ++t) high[index[c] * G + t] = (uint8_t)(s.codes[t * D + c] >> bits);
      uint8_t* low_page = q.codes.data() + n * lo.slice_low() + lo.page_low(p);
      uint8_t* high_page = q.high.data() + n * lo.slice_high() + lo.page_high(p);
      const int64_t low_row = packed_bytes(len, bits), high_row = packed_bytes(len, 2);
      detail::pack_tile(low.data(), len, D, bits, low_page, low_row, 0, s.packed.data());
      for (int64_t i = 0; i < k; ++i) pack_row(&high[i * G], len, 2, high_page + i * high_row);
    }
  }
}

// Throws unless `channels` holds, per (slice, page), k distinct channels in [0, D).
void check_boost_channels(const TensorView& x, const QuantizerSpec& spec, const Layout& lo,
                          const std::vector<int32_t>& channels) {
  if (!spec.boosted())
    throw std::invalid_argument("quantize: boost channels were given but spec " + to_string(spec) +
                                " has no boost");
  const int64_t N = lo.N, P = lo.groups, k = lo.k, D = lo.D;
  if ((int64_t)channels.size() != N * P * k)
    throw std::invalid_argument("quantize: boost channels hold " + std::to_string(channels.size()) +
                                " entries; input " + shape_string(x.shape) + " needs N*P*k = " +
                                std::to_string(N) + "*" + std::to_string(P) + "*" + std::to_string(k));
  std::vector<char> seen(D);
  for (int64_t w = 0; w < N * P; ++w) {
    std::fill(seen.begin(), seen.end(), 0);
    for (int64_t i = 0; i < k; ++i) {
      const int32_t c = channels[w * k + i];
      if (c < 0 || c >= D || seen[c])
        throw std::invalid_argument("quantize: boost channel " + std::to_string(c) + " in page row " +
                                    std::to_string(w) + " is out of [0, " + std::to_string(D) +
                                    ") or repeated");
      seen[c] = 1;
    }
  }
}

QuantizedTensor quantize_impl(const TensorView& x, const QuantizerSpec& spec, const Layout& lo,
                              const int32_t* chosen) {
  QuantizedTensor q;
  q.spec = spec;
  q.shape = x.shape;
  q.group = lo.G;
  q.boost_k = lo.k;
  const bool half = spec.params == ParamType::F16;
  const bool asym = spec.scheme == Scheme::Asym;
  q.codes.assign(lo.codes_bytes(), 0);
  q.scale.assign(lo.n_params(), 0.0f);
  if (asym) q.zero.assign(lo.n_params(), 0.0f);
  q.high.assign(lo.high_bytes(), 0);
  q.boost_index.assign(lo.index_bytes(), kNotBoosted);
  Overflow of;
  detail::with_input(x, [&](const auto* in) {
    detail::with_recipe(spec.profile, [&](auto recipe) {
      using R = decltype(recipe);
      if (spec.boosted()) {
        if constexpr (!std::is_same_v<R, KiviRecipe>) quantize_boost<R>(in, lo, half, q, of, chosen);
      } else if (spec.axis == Axis::Channel) {
        if (asym)
          quantize_channel<R, false>(in, lo, half, q, of);
        else
          quantize_channel<KvlabRecipe, true>(in, lo, half, q, of);
      } else {
        if (asym)
          quantize_token<R, false>(in, lo, half, q, of);
        else
          quantize_token<KvlabRecipe, true>(in, lo, half, q, of);
      }
    });
  });
  if (of.bad) {
    const bool fp16 = half || spec.profile != Profile::Kvlab;
    const std::string advice = spec.profile != Profile::Kvlab
                                   ? std::string("profile=") + to_string(spec.profile) +
                                         " computes in fp16 as upstream does, and would produce inf/NaN here"
                                   : (fp16 ? "use params=fp32" : "the input's range is too large for fp32");
    throw std::invalid_argument("quantize: group " + std::to_string(of.group) + " of row " +
                                std::to_string(of.row) + " in slice " + std::to_string(of.n) + " spans [" +
                                std::to_string(of.mn) + ", " + std::to_string(of.mx) +
                                "], whose scale or zero overflows " + (fp16 ? "fp16" : "fp32") + " (spec " +
                                to_string(spec) + "); " + advice);
  }
  return q;
}

}  // namespace

QuantizedTensor quantize(const TensorView& x, const QuantizerSpec& spec) {
  return quantize_impl(x, spec, check_input(x, spec), nullptr);
}

QuantizedTensor quantize(const TensorView& x, const QuantizerSpec& spec,
                         const std::vector<int32_t>& boost_channels) {
  const Layout lo = check_input(x, spec);
  check_boost_channels(x, spec, lo, boost_channels);
  return quantize_impl(x, spec, lo, boost_channels.data());
}

}  // namespace kvlab
