// CPU reference: unpack and dequantize the plain and the Kitty-boost formats.
// Every format is decoded into token-major tiles [len][D] with per-channel parameters, so
// the per-element recipe calls vectorize across channels.
#include <algorithm>
#include <vector>

#include "dispatch.h"
#include "kvlab/pack.h"
#include "kvlab/quantizer.h"
#include "tiles.h"

namespace kvlab {
namespace {

constexpr int64_t kChunk = 128;

// A decoded tile: `len` token rows of D codes starting at flat element `first` of the
// input layout; channel c uses scale[c], zero[c].
struct Tile {
  int64_t first, len;
  const uint8_t* codes;
  const float* scale;
  const float* zero;
};

template <class F>
void decode_tiles(const QuantizedTensor& q, F&& emit) {
  const PackedLayout lo = layout_of(q);
  const int bits = lo.bits;
  const int64_t D = lo.D;
  const bool asym = q.spec.scheme == Scheme::Asym;
#pragma omp parallel
  {
    std::vector<uint8_t> codes(kChunk * D), scratch(kChunk * D + D), high(kChunk);
    std::vector<float> scale(D), zero(D, 0.0f);
    if (q.spec.boosted()) {
#pragma omp for schedule(static)
      for (int64_t w = 0; w < lo.N * lo.groups; ++w) {
        const int64_t n = w / lo.groups, p = w % lo.groups, len = lo.page_tokens(p);
        const uint8_t* low = q.codes.data() + n * lo.slice_low() + lo.page_low(p);
        const uint8_t* hi = q.high.data() + n * lo.slice_high() + lo.page_high(p);
        const uint8_t* index = q.boost_index.data() + w * D;
        const int64_t low_row = packed_bytes(len, bits), high_row = packed_bytes(len, 2);
        std::copy_n(&q.scale[w * D], D, scale.begin());
        std::copy_n(&q.zero[w * D], D, zero.begin());
        for (int64_t c0 = 0; c0 < len; c0 += kChunk) {
          const int64_t cl = std::min(kChunk, len - c0);
          detail::unpack_tile(low, low_row, c0, cl, D, bits, codes.data(), scratch.data());
          for (int64_t c = 0; c < D; ++c) {
            if (index[c] == kNotBoosted) continue;
            const uint8_t* row = hi + index[c] * high_row;
            for (int64_t t = 0; t < cl; ++t) codes[t * D + c] |= (uint8_t)(get_code(row, c0 + t, 2) << bits);
          }
          emit(Tile{lo.elem(n, p * lo.G + c0, 0), cl, codes.data(), scale.data(), zero.data()});
        }
      }
    } else if (lo.channel) {
#pragma omp for schedule(static)
      for (int64_t w = 0; w < lo.N * lo.groups; ++w) {
        const int64_t n = w / lo.groups, g = w % lo.groups, t0 = g * lo.G,
                      len = std::min<int64_t>(lo.G, lo.T - t0);
        for (int64_t c = 0; c < D; ++c) {
          scale[c] = q.scale[(n * D + c) * lo.groups + g];
          if (asym) zero[c] = q.zero[(n * D + c) * lo.groups + g];
        }
        for (int64_t c0 = 0; c0 < len; c0 += kChunk) {
          const int64_t cl = std::min(kChunk, len - c0);
          detail::unpack_tile(q.codes.data() + n * D * lo.row_bytes, lo.row_bytes, t0 + c0, cl, D, bits,
                              codes.data(), scratch.data());
          emit(Tile{lo.elem(n, t0 + c0, 0), cl, codes.data(), scale.data(), zero.data()});
        }
      }
    } else {
#pragma omp for schedule(static)
      for (int64_t r = 0; r < lo.N * lo.T; ++r) {
        unpack_row(q.codes.data() + r * lo.row_bytes, D, bits, codes.data());
        for (int64_t g = 0; g < lo.groups; ++g) {  // each group's params over its channels
          const int64_t c0 = g * lo.G, c1 = std::min(D, c0 + lo.G);
          std::fill(&scale[c0], &scale[0] + c1, q.scale[r * lo.groups + g]);
          if (asym) std::fill(&zero[c0], &zero[0] + c1, q.zero[r * lo.groups + g]);
        }
        emit(Tile{r * D, 1, codes.data(), scale.data(), zero.data()});
      }
    }
  }
}

template <class Recipe, bool Sym, class Out, class Convert>
void dequantize_row(const uint8_t* __restrict codes, const float* __restrict scale,
                    const float* __restrict zero, int64_t D, int bits, Out* __restrict out, Convert convert) {
  for (int64_t c = 0; c < D; ++c) {
    const GroupParams p{scale[c], zero[c]};
    out[c] = convert(Sym ? KvlabRecipe::sym_dequant(codes[c], p, bits) : Recipe::asym_dequant(codes[c], p));
  }
}

template <class Out, class Convert>
void dequantize_to(const QuantizedTensor& q, Out* out, Convert convert) {
  const int64_t D = q.dims();
  const int bits = q.spec.bits;
  detail::with_recipe(q.spec.profile, [&](auto recipe) {
    using R = decltype(recipe);
    decode_tiles(q, [&](const Tile& t) {
      for (int64_t i = 0; i < t.len; ++i) {
        if (q.spec.scheme == Scheme::Sym)
          dequantize_row<R, true>(t.codes + i * D, t.scale, t.zero, D, bits, &out[t.first + i * D], convert);
        else
          dequantize_row<R, false>(t.codes + i * D, t.scale, t.zero, D, bits, &out[t.first + i * D], convert);
      }
    });
  });
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
  decode_tiles(q, [&](const Tile& t) { std::copy_n(t.codes, t.len * q.dims(), &out[t.first]); });
  return out;
}

void dequantize(const QuantizedTensor& q, float* out) {
  dequantize_to(q, out, [](float v) { return v; });
}

void dequantize_half(const QuantizedTensor& q, uint16_t* out) {
  dequantize_to(q, out, [](float v) { return float_to_half(v); });
}

std::vector<float> dequantize(const QuantizedTensor& q) {
  std::vector<float> out(numel(q.shape));
  dequantize(q, out.data());
  return out;
}

std::vector<uint16_t> dequantize_half(const QuantizedTensor& q) {
  std::vector<uint16_t> out(numel(q.shape));
  dequantize_half(q, out.data());
  return out;
}

double packed_bits(const std::vector<int64_t>& shape, const QuantizerSpec& spec) {
  return make_layout(shape, spec).payload_bits();
}

double bits_per_element(const QuantizedTensor& q) {
  return layout_of(q).payload_bits() / (double)numel(q.shape);
}

}  // namespace kvlab
