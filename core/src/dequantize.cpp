// CPU reference: unpack and dequantize the plain and the Kitty-boost formats.
#include <vector>

#include "dispatch.h"
#include "kvlab/pack.h"
#include "kvlab/quantizer.h"
#include "layout.h"

namespace kvlab {
namespace {

using detail::Layout;

// Visit every element as (flat index in the input layout, code, group params, code bits).
template <class F>
void for_each_code(const QuantizedTensor& q, F&& f) {
  const Layout lo(q);
  const int bits = lo.bits;
  const bool asym = q.spec.scheme == Scheme::Asym;
  auto params = [&](int64_t s) { return GroupParams{q.scale[s], asym ? q.zero[s] : 0.0f}; };
  if (q.spec.boosted()) {
#pragma omp parallel for schedule(static)
    for (int64_t w = 0; w < lo.N * lo.P; ++w) {
      const int64_t n = w / lo.P, p = w % lo.P, t0 = p * lo.G, len = lo.page_tokens(p);
      const uint8_t* low = q.codes.data() + n * lo.slice_low() + lo.page_low(p);
      const uint8_t* high = q.high.data() + n * lo.slice_high() + lo.page_high(p);
      const uint8_t* index = q.boost_index.data() + w * lo.D;
      const int64_t low_row = packed_bytes(len, bits), high_row = packed_bytes(len, 2);
      for (int64_t i = 0; i < len; ++i)
        for (int64_t c = 0; c < lo.D; ++c) {
          uint32_t code = get_code(low + c * low_row, i, bits);
          int width = bits;
          if (index[c] != kNotBoosted) {
            code |= get_code(high + index[c] * high_row, i, 2) << bits;
            width = boosted_bits(bits);
          }
          f(lo.elem(n, t0 + i, c), code, params(w * lo.D + c), width);
        }
    }
  } else if (lo.channel) {
#pragma omp parallel for schedule(static)
    for (int64_t w = 0; w < lo.N * lo.groups; ++w) {
      const int64_t n = w / lo.groups, g = w % lo.groups, t0 = g * lo.G;
      const int64_t len = std::min(lo.G, lo.T - t0);
      for (int64_t t = t0; t < t0 + len; ++t)
        for (int64_t c = 0; c < lo.D; ++c) {
          const uint8_t* row = q.codes.data() + (n * lo.D + c) * lo.row_bytes;
          f(lo.elem(n, t, c), get_code(row, t, bits), params((n * lo.D + c) * lo.groups + g), bits);
        }
    }
  } else {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < lo.N * lo.T; ++r) {
      const uint8_t* row = q.codes.data() + r * lo.row_bytes;
      for (int64_t c = 0; c < lo.D; ++c)
        f(r * lo.D + c, get_code(row, c, bits), params(r * lo.groups + c / lo.G), bits);
    }
  }
}

template <class Out, class Convert>
std::vector<Out> dequantize_to(const QuantizedTensor& q, Convert convert) {
  std::vector<Out> out(numel(q.shape));
  const bool sym = q.spec.scheme == Scheme::Sym;
  detail::with_recipe(q.spec.profile, [&](auto recipe) {
    using R = decltype(recipe);
    for_each_code(q, [&](int64_t i, uint32_t code, GroupParams p, int width) {
      out[i] = convert(sym ? KvlabRecipe::sym_dequant(code, p, width) : R::asym_dequant(code, p));
    });
  });
  return out;
}

}  // namespace

int64_t QuantizedTensor::slices() const {
  int64_t n = 1;
  for (size_t i = 0; i + 2 < shape.size(); ++i) n *= shape[i];
  return n;
}

int64_t QuantizedTensor::pages() const { return (tokens() + group - 1) / group; }

std::vector<uint8_t> unpack_codes(const QuantizedTensor& q) {
  std::vector<uint8_t> out(numel(q.shape));
  for_each_code(q, [&](int64_t i, uint32_t code, GroupParams, int) { out[i] = (uint8_t)code; });
  return out;
}

std::vector<float> dequantize(const QuantizedTensor& q) {
  return dequantize_to<float>(q, [](float v) { return v; });
}

std::vector<uint16_t> dequantize_half(const QuantizedTensor& q) {
  return dequantize_to<uint16_t>(q, [](float v) { return float_to_half(v); });
}

double bits_per_element(const QuantizedTensor& q) {
  const double elems = (double)numel(q.shape);
  const double param_bits = q.spec.params == ParamType::F16 ? 16.0 : 32.0;
  double bits = elems * q.spec.bits + (double)(q.scale.size() + q.zero.size()) * param_bits;
  if (q.spec.boosted()) {
    const Layout lo(q);
    bits += (double)lo.N * lo.k * lo.T * 2.0;           // high plane: 2 bits per boosted element
    bits += (double)q.boost_index.size() * 8.0;         // uint8 channel -> slot index per page
  }
  return bits / elems;
}

}  // namespace kvlab
