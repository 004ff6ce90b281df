// CPU reference of the scaled floating-point formats: token rows of D channels, per-element
// arithmetic only through float_format.h's KV_HD recipe (the GPU calls the same functions).
#include "kvlab/float_quant.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <stdexcept>

#include "kvlab/half_rows.h"
#include "kvlab/kv_text.h"
#include "tiles.h"

namespace kvlab {

FloatSpec parse_float_spec(const std::string& text) {
  FloatSpec s;
  bool scale_set = false;
  for (const auto& [key, v] : text::split_pairs(text, "float format spec")) {
    if (key == "fmt") {
      s.format = parse_enum<FloatFormat>(v, key);
    } else if (key == "scale") {
      s.scale = parse_enum<FloatScale>(v, key);
      scale_set = true;
    } else {
      text::choose(key, "float format key", {"fmt", "scale"});
    }
  }
  if (scale_set && !s.fp8())
    throw std::invalid_argument("float format spec '" + text + "': scale= applies to e4m3 and e5m2 only (" +
                                enum_name(s.format) + " has block scales)");
  return s;
}

std::string to_string(const FloatSpec& s) {
  std::string out = std::string("fmt=") + enum_name(s.format);
  if (s.fp8()) out += std::string(",scale=") + enum_name(s.scale);
  return out;
}

FloatLayout make_float_layout(const std::vector<int64_t>& shape, const FloatSpec& s) {
  if (shape.size() < 2 || numel(shape) <= 0)
    throw std::invalid_argument("float format " + to_string(s) + ": shape " + shape_string(shape) +
                                " is empty or not (..., T, D)");
  FloatLayout L;
  L.T = shape[shape.size() - 2];
  L.D = shape.back();
  L.N = numel(shape) / (L.T * L.D);
  L.format = s.format;
  L.scale = s.scale;
  return L;
}

namespace {

// Elements [first, first + n) of x as fp32 (fp16 converts exactly).
void load(const TensorView& x, int64_t first, int64_t n, float* out) {
  if (x.dtype == DType::F16)
    detail::load_floats(static_cast<const uint16_t*>(x.data) + first, out, n);
  else
    detail::load_floats(static_cast<const float*>(x.data) + first, out, n);
}

// x as fp32, one contiguous copy (fp16 converts exactly).
std::vector<float> floats_of(const TensorView& x) {
  std::vector<float> out(x.numel());
  if (x.dtype == DType::F16)
    detail::load_floats(static_cast<const uint16_t*>(x.data), out.data(), x.numel());
  else
    detail::load_floats(static_cast<const float*>(x.data), out.data(), x.numel());
  return out;
}

// |x| as ordered bits: non-negative floats order like their bit patterns, so an integer max
// (which vectorizes) gives the total-order f_max of the magnitudes (-0 counts as +0, as
// f_max(+0, -0) = +0 does); the GPU reduces the same way.
inline uint32_t abs_bits(float v) { return float_bits(v) & 0x7fffffffu; }

// The absmax of each scale group straight from x, with no fp32 copy: integer maxima of |x|'s
// bits per channel, then per group (fp16 inputs on their own bits, which order as their values
// do and convert exactly). non_finite: some |x| has the bits of Inf or NaN (at or above Inf's).
template <class T, class Bits, Bits (*magnitude)(T)>
Bits column_max(const T* x, const FloatLayout& L, std::vector<uint32_t>& m) {
  std::vector<Bits> col(L.D);
  Bits top = 0;
  for (int64_t n = 0; n < L.N; ++n) {
    std::fill(col.begin(), col.end(), Bits{0});
    for (int64_t t = 0; t < L.T; ++t) {
      const T* row = x + (n * L.T + t) * L.D;
      for (int64_t c = 0; c < L.D; ++c) col[c] = std::max(col[c], magnitude(row[c]));
    }
    for (int64_t c = 0; c < L.D; ++c) {
      top = std::max(top, col[c]);
      const uint32_t b = sizeof(Bits) == 2 ? float_bits(half_to_float((uint16_t)col[c])) : (uint32_t)col[c];
      uint32_t& g = m[L.scale_index(n, c)];
      g = std::max(g, b);
    }
  }
  return top;
}

inline uint16_t half_magnitude(uint16_t h) { return h & 0x7fffu; }

std::vector<float> group_absmax(const TensorView& x, const FloatLayout& L, bool* non_finite) {
  std::vector<uint32_t> m(L.fp4() ? 1 : L.n_scales(), 0u);
  if (x.dtype == DType::F16)
    *non_finite =
        column_max<uint16_t, uint16_t, half_magnitude>(static_cast<const uint16_t*>(x.data), L, m) >= 0x7c00u;
  else
    *non_finite =
        column_max<float, uint32_t, abs_bits>(static_cast<const float*>(x.data), L, m) >= 0x7f800000u;
  std::vector<float> out(m.size());
  for (size_t g = 0; g < m.size(); ++g) out[g] = bits_float(m[g]);
  return out;
}

// True when x holds an Inf or NaN: one integer max over the magnitude bits (fp16 on its own
// bits), which vectorizes; check_finite, a slower scalar pass, then names the first.
bool any_non_finite(const TensorView& x) {
  const int64_t n = x.numel();
  if (x.dtype == DType::F16) {
    const uint16_t* p = static_cast<const uint16_t*>(x.data);
    uint16_t top = 0;
    for (int64_t i = 0; i < n; ++i) top = std::max(top, half_magnitude(p[i]));
    return top >= 0x7c00u;
  }
  const float* p = static_cast<const float*>(x.data);
  uint32_t top = 0;
  for (int64_t i = 0; i < n; ++i) top = std::max(top, abs_bits(p[i]));
  return top >= 0x7f800000u;
}

// The value of rank ceil(p/100 * n) among the n values (nearest-rank percentile); p = 100: the max.
float percentile_of(std::vector<float>& v, double p) {
  if (v.empty()) return 0.0f;
  int64_t k = (int64_t)std::ceil(p / 100.0 * (double)v.size()) - 1;
  k = std::clamp<int64_t>(k, 0, (int64_t)v.size() - 1);
  std::nth_element(v.begin(), v.begin() + k, v.end());
  return v[k];
}

// The p-th percentile (p < 100) of |x| in each fp32 scale's group.
std::vector<float> group_percentile(const std::vector<float>& x, const FloatLayout& L, double p) {
  const int64_t groups = L.fp4() ? 1 : L.n_scales();
  std::vector<std::vector<float>> vals(groups);
  for (int64_t n = 0; n < L.N; ++n)
    for (int64_t t = 0; t < L.T; ++t)
      for (int64_t c = 0; c < L.D; ++c)
        vals[L.scale_index(n, c)].push_back(std::fabs(x[(n * L.T + t) * L.D + c]));
  std::vector<float> out(groups);
  for (int64_t g = 0; g < groups; ++g) out[g] = percentile_of(vals[g], p);
  return out;
}

}  // namespace

void check_float_scales(const std::vector<float>& s, const FloatLayout& L, const FloatSpec& spec) {
  if ((int64_t)s.size() != L.n_scales())
    throw std::invalid_argument("quantize_float " + to_string(spec) + ": " + std::to_string(s.size()) +
                                " scales given, the layout has " + std::to_string(L.n_scales()));
  for (size_t i = 0; i < s.size(); ++i)
    if (!(std::isfinite(s[i]) && s[i] > 0.0f))
      throw std::invalid_argument("quantize_float " + to_string(spec) + ": scale " + std::to_string(i) +
                                  " = " + text::format_double(s[i]) + " is not finite and positive");
}

namespace {

// fp8 codes of one token row: fp8_code(x, s) with the format fixed at compile time, so the
// loop vectorizes.
template <bool E5>
void fp8_codes(const float* __restrict x, const float* __restrict sc, bool per_channel, int64_t D,
               uint8_t* __restrict out) {
  const MiniFloat f = E5 ? e5m2_type() : e4m3_type();
  if (per_channel)
    for (int64_t c = 0; c < D; ++c) out[c] = (uint8_t)minifloat_encode(f_div(x[c], sc[c]), f);
  else
    for (int64_t c = 0; c < D; ++c) out[c] = (uint8_t)minifloat_encode(f_div(x[c], sc[0]), f);
}

// fp8_to_float(c, false) of every E4M3 code, looked up: the same numbers, and the block-scale
// loop then vectorizes (the decode's two cases do not).
const std::array<float, 256> kE4M3Value = [] {
  std::array<float, 256> t{};
  for (int i = 0; i < 256; ++i) t[i] = fp8_to_float((uint8_t)i, false);
  return t;
}();

// Scratch of one thread for fp4_row: the row's block maxima and scales, its codes unpacked.
struct Fp4Scratch {
  std::vector<uint32_t> amax;  // |x| bits, per block
  std::vector<float> S;        // block scale, per block
  std::vector<uint32_t> code;  // its code, widened so the loop runs 8 blocks to a vector
  std::vector<uint32_t> q;     // one code per element, widened as `code` (+1: an odd D packs a
                               // zero high nibble)
  explicit Fp4Scratch(const FloatLayout& L) : amax(L.blocks()), S(L.blocks()), code(L.blocks()), q(L.D + 1) {}
};

// One token row of fp4 in passes over the whole row, each a loop that vectorizes across
// blocks or elements (B fixed at compile time; a last partial block takes the scalar tail):
// block maxima, block scales (`block(amax, &S)` returns the scale's code), codes, then two
// codes per byte. The same recipe calls as one block at a time, so the same bytes. Codes are
// kept as 32-bit words until packed: with bytes GCC vectorized 16 blocks or elements at a time
// in 4-lane pieces, and a 128-channel NVFP4 row (8 blocks) always fell to the scalar tail.
template <int B, class BlockScale>
void fp4_row(const float* __restrict x, int64_t D, uint8_t* __restrict codes, uint8_t* __restrict bscale,
             Fp4Scratch& w, BlockScale block) {
  const int64_t full = D / B, nb = (D + B - 1) / B;
  uint32_t* __restrict amax = w.amax.data();
  float* __restrict S = w.S.data();
  uint32_t* __restrict code = w.code.data();
  uint32_t* __restrict q = w.q.data();
  for (int64_t b = 0; b < full; ++b) {
    uint32_t m = 0;
    for (int j = 0; j < B; ++j) m = std::max(m, abs_bits(x[b * B + j]));
    amax[b] = m;
  }
  if (full < nb) {
    uint32_t m = 0;
    for (int64_t c = full * B; c < D; ++c) m = std::max(m, abs_bits(x[c]));
    amax[full] = m;
  }
  for (int64_t b = 0; b < nb; ++b) code[b] = block(bits_float(amax[b]), &S[b]);
  for (int64_t b = 0; b < nb; ++b) bscale[b] = (uint8_t)code[b];
  for (int64_t b = 0; b < full; ++b)
    for (int j = 0; j < B; ++j) q[b * B + j] = fp4_code(x[b * B + j], S[b]);
  for (int64_t c = full * B; c < D; ++c) q[c] = fp4_code(x[c], S[full]);
  q[D] = 0;
  for (int64_t j = 0; j < (D + 1) / 2; ++j) codes[j] = (uint8_t)(q[2 * j] | (q[2 * j + 1] << 4));
}

void fp4_row(const float* x, const FloatLayout& L, float s_t, uint8_t* codes, uint8_t* bscale,
             Fp4Scratch& w) {
  if (L.format == FloatFormat::NVFP4)
    fp4_row<16>(x, L.D, codes, bscale, w, [s_t](float amax, float* S) -> uint32_t {
      const uint32_t c = nvfp4_block_code(amax, s_t);
      *S = f_mul(kE4M3Value[c], s_t);  // nvfp4_block_scale
      return c;
    });
  else
    fp4_row<32>(x, L.D, codes, bscale, w, [](float amax, float* S) -> uint32_t {
      const uint8_t c = mxfp4_block_code(amax);
      *S = mxfp4_block_scale(c);
      return c;
    });
}

}  // namespace

std::vector<float> float_scales(const TensorView& calib, const FloatSpec& s, const Calibration& c) {
  const char* what = "float_scales: calibration values";
  const bool valid = c.percentile > 0.0 && c.percentile <= 100.0;
  const bool absmax =
      valid && (s.format == FloatFormat::NVFP4 || (c.percentile == 100.0 && s.format != FloatFormat::MXFP4));
  // The absmax scan finds non-finite values itself; check_finite then names the first. Every
  // other case checks first, so errors come in the same order either way.
  if (!absmax || calib.shape.size() < 2 || calib.numel() <= 0) check_finite(calib, what);
  const FloatLayout L = make_float_layout(calib.shape, s);
  if (absmax) {
    bool non_finite = false;
    const std::vector<float> m = group_absmax(calib, L, &non_finite);
    if (non_finite) check_finite(calib, what);
    if (s.format == FloatFormat::NVFP4) return {nvfp4_tensor_scale(m[0])};
    std::vector<float> out = m;
    for (float& v : out) v = fp8_scale(v, L.e5m2());
    return out;
  }
  if (!valid)
    throw std::invalid_argument("float_scales: percentile " + text::format_double(c.percentile) +
                                " is outside (0, 100]");
  if (s.format == FloatFormat::MXFP4) return {};
  std::vector<float> out = group_percentile(floats_of(calib), L, c.percentile);
  for (float& v : out) v = fp8_scale(v, L.e5m2());
  return out;
}

namespace {

// The codes of x with valid scales; x already checked finite.
FloatQuantized encode(const TensorView& x, const FloatSpec& s, const FloatLayout& L,
                      const std::vector<float>& scales) {
  FloatQuantized q{s, x.shape, std::vector<uint8_t>(L.codes_bytes()), scales,
                   std::vector<uint8_t>(L.block_scale_bytes())};
  const int64_t rows = L.N * L.T, D = L.D;
  const bool e5m2 = L.e5m2();
  // each token row converted to fp32 where it is used (no full fp32 copy of the input)
#pragma omp parallel
  {
    std::vector<float> buf(D);
    Fp4Scratch fp4(L);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      load(x, r * D, D, buf.data());
      const float* xr = buf.data();
      if (L.fp4()) {
        fp4_row(xr, L, L.format == FloatFormat::NVFP4 ? scales[0] : 0.0f, &q.codes[r * L.row_bytes()],
                &q.block_scale[r * L.blocks()], fp4);
        continue;
      }
      const float* sc = &scales[L.scale_index(r / L.T, 0)];
      if (e5m2)
        fp8_codes<true>(xr, sc, L.scale == FloatScale::Channel, D, &q.codes[r * D]);
      else
        fp8_codes<false>(xr, sc, L.scale == FloatScale::Channel, D, &q.codes[r * D]);
    }
  }
  return q;
}

}  // namespace

// Dynamic scales: float_scales' scan has checked x, so it is read twice, not three times
// (MXFP4 has no tensor scale: checked once, then encoded).
FloatQuantized quantize_float(const TensorView& x, const FloatSpec& s) {
  if (s.format == FloatFormat::MXFP4) return quantize_float(x, s, {});
  const std::vector<float> scales = float_scales(x, s);
  const FloatLayout L = make_float_layout(x.shape, s);
  check_float_scales(scales, L, s);
  return encode(x, s, L, scales);
}

FloatQuantized quantize_float(const TensorView& x, const FloatSpec& s, const std::vector<float>& scales) {
  const FloatLayout L = make_float_layout(x.shape, s);
  if (any_non_finite(x)) check_finite(x, "quantize_float: input");
  check_float_scales(scales, L, s);
  return encode(x, s, L, scales);
}

std::vector<float> dequantize_float(const FloatQuantized& q) {
  const FloatLayout L = make_float_layout(q.shape, q.spec);
  if ((int64_t)q.codes.size() != L.codes_bytes() || (int64_t)q.scale.size() != L.n_scales() ||
      (int64_t)q.block_scale.size() != L.block_scale_bytes())
    throw std::invalid_argument("dequantize_float " + to_string(q.spec) + ": arrays do not match shape " +
                                shape_string(q.shape));
  std::vector<float> out(L.N * L.T * L.D);
  const int64_t rows = L.N * L.T, D = L.D;
  // every code's value (fp8_to_float / fp4_to_float), looked up: the same numbers, faster loops
  float value[256];
  for (int c = 0; c < 256; ++c)
    value[c] = L.fp4() ? fp4_to_float((uint8_t)(c & 0xF)) : fp8_to_float((uint8_t)c, L.e5m2());
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    float* o = &out[r * D];
    if (L.fp4()) {
      const uint8_t* codes = &q.codes[r * L.row_bytes()];
      const uint8_t* bs = &q.block_scale[r * L.blocks()];
      const int64_t B = L.block();
      for (int64_t b = 0; b < L.blocks(); ++b) {
        const float S =
            L.format == FloatFormat::NVFP4 ? nvfp4_block_scale(bs[b], q.scale[0]) : mxfp4_block_scale(bs[b]);
        for (int64_t c = b * B; c < std::min(D, (b + 1) * B); ++c)
          o[c] = f_mul(value[(codes[c / 2] >> (4 * (c % 2))) & 0xFu], S);  // fp4_dequant
      }
      continue;
    }
    const uint8_t* codes = &q.codes[r * D];
    const float* sc = &q.scale[L.scale_index(r / L.T, 0)];
    if (L.scale == FloatScale::Channel)
      for (int64_t c = 0; c < D; ++c) o[c] = f_mul(value[codes[c]], sc[c]);  // fp8_dequant
    else
      for (int64_t c = 0; c < D; ++c) o[c] = f_mul(value[codes[c]], sc[0]);
  }
  return out;
}

std::vector<uint16_t> dequantize_float_half(const FloatQuantized& q) {
  const std::vector<float> f = dequantize_float(q);
  std::vector<uint16_t> out(f.size());
  float_to_half_n(f.data(), out.data(), (int64_t)f.size());
  return out;
}

double float_packed_bits(const std::vector<int64_t>& shape, const FloatSpec& s) {
  return make_float_layout(shape, s).payload_bits();
}

}  // namespace kvlab
