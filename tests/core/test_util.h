// Shared helpers of the core test suite: random inputs, the documented layouts, and an
// independent oracle of the three numerics recipes.
//
// The oracle restates core/include/kvlab/recipe.h from its comments, but rounds to fp16 with
// GCC's _Float16 conversion instead of kvlab::float_to_half, so a bug in either conversion or
// in the recipe's operation order shows up as a mismatch.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kvlab/pack.h"
#include "kvlab/quantizer.h"
#include "kvlab/spec.h"
#include "kvlab/tensor.h"

#include <unistd.h>

namespace kvtest {

// ---------------------------------------------------------------------------------------------
using kvlab::Axis;
using kvlab::ParamType;
using kvlab::Profile;
using kvlab::QuantizedTensor;
using kvlab::QuantizerSpec;
using kvlab::Scheme;
using kvlab::Tensor;

// ---------------------------------------------------------------------------------------------
// Bits and fp16 through GCC's _Float16 (independent of kvlab/half.h).

inline uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t gcc_half_bits(float f) {
  const _Float16 h = (_Float16)f;
  uint16_t u;
  std::memcpy(&u, &h, 2);
  return u;
}
inline float gcc_half_to_float(uint16_t u) {
  _Float16 h;
  std::memcpy(&h, &u, 2);
  return (float)h;
}
// Round to the nearest fp16 value (ties to even), as float.
inline float h16(float f) { return (float)(_Float16)f; }

// ---------------------------------------------------------------------------------------------
// Inputs.

inline Tensor make_tensor(std::vector<int64_t> shape, std::vector<float> data) {
  Tensor t;
  t.shape = std::move(shape);
  t.data = std::move(data);
  if ((int64_t)t.data.size() != kvlab::numel(t.shape)) throw std::logic_error("make_tensor: size mismatch");
  return t;
}

// Normal values with a per-channel magnitude (0.05 .. 8) and a few outliers, like real K/V.
inline Tensor random_kv(std::vector<int64_t> shape, uint32_t seed) {
  Tensor t;
  t.shape = std::move(shape);
  t.data.resize(kvlab::numel(t.shape));
  const int64_t D = t.shape.back();
  std::mt19937 rng(seed);
  std::vector<float> mag(D);
  std::uniform_real_distribution<float> um(0.05f, 8.0f);
  for (auto& m : mag) m = um(rng);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<int> spike(0, 199);
  for (size_t i = 0; i < t.data.size(); ++i) {
    float v = nd(rng) * mag[i % D];
    if (spike(rng) == 0) v *= 6.0f;
    t.data[i] = v;
  }
  return t;
}

inline Tensor random_uniform(std::vector<int64_t> shape, uint32_t seed, float lo, float hi) {
  Tensor t;
  t.shape = std::move(shape);
  t.data.resize(kvlab::numel(t.shape));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  for (auto& v : t.data) v = u(rng);
  return t;
}

// The same values rounded to fp16, as a tensor (fp32 storage) and as fp16 bits.
inline Tensor rounded_to_half(const Tensor& x) {
  Tensor t = x;
  for (auto& v : t.data) v = h16(v);
  return t;
}
inline std::vector<uint16_t> half_bits_of(const Tensor& x) {
  std::vector<uint16_t> b(x.data.size());
  for (size_t i = 0; i < b.size(); ++i) b[i] = gcc_half_bits(x.data[i]);
  return b;
}
inline kvlab::TensorView half_view(const std::vector<uint16_t>& bits, const std::vector<int64_t>& shape) {
  return {bits.data(), kvlab::DType::F16, shape};
}

// ---------------------------------------------------------------------------------------------
// Layout (the comments of quantizer.h): N slices of (T, D); rows along the grouped axis.

struct Geometry {
  int64_t N, T, D, R, L, G, groups;
  bool channel;
  explicit Geometry(const QuantizedTensor& q) {
    const auto& s = q.shape;
    T = s[s.size() - 2];
    D = s.back();
    N = kvlab::numel(s) / (T * D);
    channel = q.spec.axis == Axis::Channel;
    R = channel ? D : T;
    L = channel ? T : D;
    G = q.group;
    groups = (L + G - 1) / G;
  }
  int64_t n_of(int64_t i) const { return i / (T * D); }
  int64_t t_of(int64_t i) const { return (i / D) % T; }
  int64_t c_of(int64_t i) const { return i % D; }
  int64_t elem(int64_t n, int64_t t, int64_t c) const { return (n * T + t) * D + c; }
  // plain: index into scale/zero (N, R, groups); boost: (N, P, D) with P = groups.
  int64_t param_index(int64_t i, bool boosted) const {
    const int64_t n = n_of(i), t = t_of(i), c = c_of(i);
    if (boosted) return (n * groups + t / G) * D + c;
    return channel ? (n * D + c) * groups + t / G : (n * T + t) * groups + c / G;
  }
  // flat indices of the elements of parameter group s (plain) or (page, channel) s (boost)
  std::vector<int64_t> members(int64_t s, bool boosted) const {
    std::vector<int64_t> out;
    if (boosted) {
      const int64_t c = s % D, p = (s / D) % groups, n = s / (D * groups);
      for (int64_t t = p * G; t < std::min(T, (p + 1) * G); ++t) out.push_back(elem(n, t, c));
      return out;
    }
    const int64_t g = s % groups, r = (s / groups) % R, n = s / (groups * R);
    for (int64_t i = g * G; i < std::min(L, (g + 1) * G); ++i)
      out.push_back(channel ? elem(n, i, r) : elem(n, r, i));
    return out;
  }
};

// ---------------------------------------------------------------------------------------------
// Oracle of the recipes (recipe.h), written from its comments.

struct Params {
  float scale, zero;
};

inline float load(Profile p, float x) { return p == Profile::Kvlab ? x : h16(x); }
inline int levels_of(int bits) { return (1 << bits) - 1; }
inline int qmax_of(int bits) { return (1 << (bits - 1)) - 1; }
// kitty-sim's eps = 1e-4 as an fp16 value (Summer-Summer/Kitty utils_quant.py).
inline float kitty_eps() { return h16(1e-4f); }

inline Params oracle_params(const QuantizerSpec& s, float mn, float mx, int bits) {
  const bool half = s.params == ParamType::F16;
  if (s.scheme == Scheme::Sym) {
    const float absmax = std::max(std::fabs(mn), std::fabs(mx));
    const float sc = absmax / (float)qmax_of(bits);
    return {half ? h16(sc) : sc, 0.0f};
  }
  const int lv = levels_of(bits);
  switch (s.profile) {
    case Profile::Kvlab: {
      const float sc = (mx - mn) / (float)lv;
      return half ? Params{h16(sc), h16(mn)} : Params{sc, mn};
    }
    case Profile::Kivi:  // torch: half tensor / python number = multiply by the fp32 reciprocal
      return {h16(h16(mx - mn) * (1.0f / (float)lv)), mn};
    case Profile::KittySim: return {h16(std::max(h16(mx - mn), kitty_eps()) * (1.0f / (float)lv)), mn};
  }
  return {0, 0};
}

// Code of a loaded value x (two's complement in `bits` bits for sym).
inline uint32_t oracle_code(const QuantizerSpec& s, float x, Params p, int bits) {
  if (s.scheme == Scheme::Sym) {
    if (p.scale == 0.0f) return 0u;
    const int qm = qmax_of(bits);
    const float q = std::min(std::max(std::rint(x / p.scale), -(float)qm), (float)qm);
    return (uint32_t)(int32_t)q & ((1u << bits) - 1u);
  }
  const int lv = levels_of(bits);
  if (s.profile == Profile::Kvlab) {
    if (p.scale == 0.0f) return 0u;
    const float q = std::rint((x - p.zero) / p.scale);
    return (uint32_t)std::min(std::max(q, 0.0f), (float)lv);
  }
  const float q = h16(h16(x - p.zero) / p.scale);
  if (std::isnan(q)) return 0u;  // 0/0 in a constant group: CUDA's cvt gives 0
  return (uint32_t)std::rint(std::min(std::max(q, 0.0f), (float)lv));
}

inline int32_t sign_extend(uint32_t code, int bits) { return (int32_t)(code << (32 - bits)) >> (32 - bits); }

inline float oracle_dequant(const QuantizerSpec& s, uint32_t code, Params p, int bits) {
  if (s.scheme == Scheme::Sym) return (float)sign_extend(code, bits) * p.scale;
  if (s.profile == Profile::Kvlab) return (float)code * p.scale + p.zero;
  return h16(h16((float)code * p.scale) + p.zero);
}

// Kitty: channels of a page ranked by sum |x| (kvlab; fp32, token order) or by the fp16 mean
// (kitty-sim); the top k, ties to the lower channel, get slots 0..k-1 in channel order.
inline std::vector<uint8_t> oracle_boost_index(const QuantizerSpec& s, const std::vector<float>& x,
                                               const Geometry& g, int64_t n, int64_t p, int k) {
  std::vector<float> score(g.D, 0.0f);
  const int64_t t0 = p * g.G, t1 = std::min(g.T, t0 + g.G);
  for (int64_t t = t0; t < t1; ++t)
    for (int64_t c = 0; c < g.D; ++c) score[c] = score[c] + std::fabs(load(s.profile, x[g.elem(n, t, c)]));
  if (s.profile == Profile::KittySim)
    for (auto& v : score) v = h16(v * (1.0f / (float)(t1 - t0)));
  std::vector<int> order(g.D);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return score[a] > score[b]; });
  std::vector<int> chosen(order.begin(), order.begin() + k);
  std::sort(chosen.begin(), chosen.end());
  std::vector<uint8_t> index(g.D, kvlab::kNotBoosted);
  for (int i = 0; i < k; ++i) index[chosen[i]] = (uint8_t)i;
  return index;
}

// ---------------------------------------------------------------------------------------------
// Errors.

// Runs f, expects it to throw E, and returns the message ("" and a failure otherwise).
template <class E, class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw a different exception type: " << e.what();
    return "";
  }
  ADD_FAILURE() << "did not throw";
  return "";
}

// A fresh directory under the system temp dir, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "kvlab_test_XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// docs/FORMATS.md 3.1: an asym element is within scale/2 in exact arithmetic; the fp32
// division, code * scale and the final add can each add rounding, bounded by 2 ulps of the
// largest magnitude involved (code * scale is at most |deq| + |zero|).
inline double fp32_bound(double x, float scale, float zero, float deq) {
  const float m = std::max({std::fabs((float)x), std::fabs(zero), std::fabs(deq) + std::fabs(zero)});
  const double ulp = (double)std::nextafter(m, INFINITY) - (double)m;
  return (double)scale / 2 + 2 * ulp;
}

}  // namespace kvtest
