// Dequantization error bounds (profile kvlab) and round-half-to-even ties.
#include <gtest/gtest.h>

#include <cmath>
#include <iomanip>
#include <random>
#include <vector>

#include "kvlab/quantizer.h"
#include "test_util.h"

namespace {

using namespace kvlab;
using kvtest::Geometry;

QuantizerSpec kvlab_spec(Scheme scheme, int bits, Axis axis, int group, ParamType params) {
  QuantizerSpec s;
  s.scheme = scheme;
  s.bits = bits;
  s.axis = axis;
  s.group = group;
  s.params = params;
  return s;
}

// Lay out rows (R rows of L values) as a (T, D) tensor whose rows along `axis` are these rows.
Tensor from_rows(const std::vector<std::vector<float>>& rows, Axis axis) {
  const int64_t R = (int64_t)rows.size(), L = (int64_t)rows[0].size();
  Tensor t;
  t.shape = axis == Axis::Channel ? std::vector<int64_t>{L, R} : std::vector<int64_t>{R, L};
  t.data.resize(R * L);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t i = 0; i < L; ++i) t.data[axis == Axis::Channel ? i * R + r : r * L + i] = rows[r][i];
  return t;
}

// ---------------------------------------------------------------------------------------------
// Strict bound where every fp32 operation is exact.
//
// Each group of 16 has min mn = -a * 2^-k and max mn + levels * 2^-k (k in 2..5, a in 0..2^k),
// and its other values are mn + j * 2^-18. Every value is a multiple of 2^-18 below 64 in
// magnitude, so x - mn, (mx - mn) / levels = 2^-k, (x - mn) / 2^-k, code * 2^-k and + mn are all
// exact in fp32: the error is exactly |t - rint(t)| * scale <= scale / 2, with no slack at all.
TEST(ErrorBound, AsymStrictHalfStepWhereArithmeticIsExact) {
  std::mt19937 rng(5);
  for (int bits = 1; bits <= 8; ++bits)
    for (Axis axis : {Axis::Channel, Axis::Token}) {
      SCOPED_TRACE(::testing::Message() << "bits=" << bits << " axis=" << to_string(axis));
      const int levels = (1 << bits) - 1, G = 16;
      std::vector<std::vector<float>> rows(24, std::vector<float>(64));
      std::vector<float> want_scale;
      for (auto& row : rows)
        for (int g = 0; g < 64 / G; ++g) {
          const int k = 2 + (int)(rng() % 4), a = (int)(rng() % ((1u << k) + 1));
          const float step = std::ldexp(1.0f, -k), mn = -(float)a * step, range = (float)levels * step;
          const uint32_t span = (uint32_t)(range * (1 << 18));  // range in units of 2^-18
          for (int i = 0; i < G; ++i)
            row[g * G + i] = mn + (float)(rng() % (span + 1)) * std::ldexp(1.0f, -18);
          row[g * G + rng() % 8] = mn;              // min in the first half,
          row[g * G + 8 + rng() % 8] = mn + range;  // max in the second
          want_scale.push_back(step);
        }
      const Tensor x = from_rows(rows, axis);
      const QuantizedTensor q = quantize(x.view(), kvlab_spec(Scheme::Asym, bits, axis, G, ParamType::F32));
      ASSERT_EQ(q.scale, want_scale);  // rows are in the same order as the groups of q
      const Geometry geo(q);
      const std::vector<float> d = dequantize(q);
      int64_t over = 0;
      for (size_t i = 0; i < d.size(); ++i) {
        const double s = q.scale[geo.param_index((int64_t)i, false)];
        const double err = std::fabs((double)x.data[i] - (double)d[i]);
        if (err > s / 2 && over++ < 3)
          ADD_FAILURE() << "x=" << x.data[i] << " deq=" << d[i] << " scale=" << s;
      }
      EXPECT_EQ(over, 0);
    }
}

// ---------------------------------------------------------------------------------------------
// Random groups, fp32 params, against the documented bound (docs/FORMATS.md 3.1): scale/2 plus
// 2 ulps of fp32 rounding, computed in double from the fp32 values with the group's stored scale.
TEST(ErrorBound, AsymFp32RandomWithinDocumentedBound) {
  for (int bits = 1; bits <= 8; ++bits)
    for (Axis axis : {Axis::Channel, Axis::Token}) {
      SCOPED_TRACE(::testing::Message() << "bits=" << bits << " axis=" << to_string(axis));
      const Tensor x = kvtest::random_kv({4, 256, 32}, 40 + bits);
      const QuantizedTensor q = quantize(x.view(), kvlab_spec(Scheme::Asym, bits, axis, 16, ParamType::F32));
      const Geometry geo(q);
      const std::vector<uint8_t> codes = unpack_codes(q);
      const std::vector<float> d = dequantize(q);
      int64_t over = 0;
      for (size_t i = 0; i < d.size(); ++i) {
        const int64_t s = geo.param_index((int64_t)i, false);
        const double scale = q.scale[s], err = std::fabs((double)x.data[i] - (double)d[i]);
        if (err > kvtest::fp32_bound(x.data[i], q.scale[s], q.zero[s], d[i]) && over++ < 2)
          ADD_FAILURE() << std::hexfloat << "x=" << x.data[i] << " zero=" << q.zero[s]
                        << " scale=" << q.scale[s] << " code=" << std::dec << (int)codes[i]
                        << " deq=" << std::hexfloat << d[i] << std::defaultfloat
                        << ": err/scale = " << std::setprecision(12) << err / scale;
      }
      EXPECT_EQ(over, 0) << "elements farther than scale/2 + 2 ulp from their input";
    }
}

// The smallest case of the above, by hand. bits 2, one group [0, 1, 0.5] (axis=channel, (3, 1)):
//   min 0, max 1, scale = fl32(1/3) = 0x1.555556p-2 = 0.333333343 (above 1/3 by 1e-8)
//   x = 0.5: the exact quotient 0.5 / 0.333333343 = 1.49999996 lies 4.5e-8 below 1.5, inside
//   half an fp32 ulp (6e-8) of 1.5, so fl32(0.5 / scale) = 1.5; rint -> 2 (to even)
//   dequant = 2 * scale = 0.666666687: |0.5 - 0.666666687| = 0.166666687 > scale/2 = 0.166666672
//   code 1 (dequant 0.333333343, error 0.166666657) would be within scale/2; the recipe picks 2,
//   which docs/FORMATS.md 3.1 documents (scale/2 + fp32 rounding). This pins that behaviour.
TEST(ErrorBound, AsymFp32HalfStepHandExample) {
  const Tensor x = kvtest::make_tensor({3, 1}, {0.0f, 1.0f, 0.5f});
  const QuantizedTensor q =
      quantize(x.view(), kvlab_spec(Scheme::Asym, 2, Axis::Channel, kWholeAxis, ParamType::F32));
  ASSERT_EQ(q.scale[0], 1.0f / 3.0f);
  ASSERT_EQ(q.zero[0], 0.0f);
  EXPECT_EQ(unpack_codes(q)[2], 2);
  const float d = dequantize(q)[2];
  EXPECT_EQ(d, 2 * (1.0f / 3.0f));
  const double err = std::fabs(0.5 - (double)d);
  EXPECT_GT(err, (double)q.scale[0] / 2) << "the fp32 quotient rounds onto the tie";
  EXPECT_LE(err, kvtest::fp32_bound(0.5, q.scale[0], q.zero[0], d));
}

// What the recipe does guarantee, with no slack: code = rint(fl(fl(x - zero) / scale)) rounds
// that fp32 quotient to the nearest integer, ties to even, clamped to [0, levels]. The dequantized
// value is then within scale/2 plus the fp32 rounding of the quotient and of code * scale + zero:
// each operation errs by at most 2^-24 relative, so the extra is below
// 2^-22 * (levels * scale + |zero| + |x|).
TEST(ErrorBound, AsymRandomFp32QuotientRoundsToNearestEven) {
  for (int bits = 1; bits <= 8; ++bits)
    for (Axis axis : {Axis::Channel, Axis::Token}) {
      SCOPED_TRACE(::testing::Message() << "bits=" << bits << " axis=" << to_string(axis));
      const int levels = (1 << bits) - 1;
      const Tensor x = kvtest::random_kv({4, 256, 32}, 40 + bits);
      const QuantizedTensor q = quantize(x.view(), kvlab_spec(Scheme::Asym, bits, axis, 16, ParamType::F32));
      const Geometry geo(q);
      const std::vector<uint8_t> codes = unpack_codes(q);
      const std::vector<float> d = dequantize(q);
      int64_t bad_round = 0, over = 0;
      for (size_t i = 0; i < d.size(); ++i) {
        const int64_t s = geo.param_index((int64_t)i, false);
        const float scale = q.scale[s], zero = q.zero[s];
        const float t = (x.data[i] - zero) / scale;  // the fp32 quotient of the recipe
        const float c = codes[i];
        const bool ok = t >= (float)levels
                            ? codes[i] == levels
                            : std::fabs(t - c) < 0.5f || (std::fabs(t - c) == 0.5f && codes[i] % 2 == 0);
        if (!ok && bad_round++ < 3) ADD_FAILURE() << "quotient " << t << " coded as " << (int)codes[i];
        const double err = std::fabs((double)x.data[i] - (double)d[i]);
        const double slack = std::ldexp(levels * (double)scale + std::fabs(zero) + std::fabs(x.data[i]), -22);
        if (err > scale / 2.0 + slack && over++ < 3)
          ADD_FAILURE() << "x=" << x.data[i] << " deq=" << d[i] << " scale=" << scale
                        << " err/scale=" << err / scale;
      }
      EXPECT_EQ(bad_round, 0);
      EXPECT_EQ(over, 0);
    }
}

// fp16 params: the stored zero is fp16(min) and the stored scale fp16((max - min) / levels).
// Codes are taken from the stored zero and scale, so an element errs by at most scale/2 plus
// |zero - min| where the zero was rounded past the min (the top clamp costs levels * |s - s16| <=
// 255 * 2^-11 * s, inside that scale/2, for scales in fp16's normal range, which these groups
// have). Checked strictly: scale/2 + |zero - true min|, no slack.
TEST(ErrorBound, AsymFp16ParamsWithinHalfStepPlusZeroRounding) {
  for (int bits = 1; bits <= 8; ++bits)
    for (Axis axis : {Axis::Channel, Axis::Token}) {
      SCOPED_TRACE(::testing::Message() << "bits=" << bits << " axis=" << to_string(axis));
      const Tensor x = kvtest::random_kv({2, 128, 32}, 60 + bits);
      const QuantizedTensor q = quantize(x.view(), kvlab_spec(Scheme::Asym, bits, axis, 16, ParamType::F16));
      const Geometry geo(q);
      const std::vector<float> d = dequantize(q);
      std::vector<float> true_min(q.scale.size());
      for (size_t s = 0; s < q.scale.size(); ++s) {
        float mn = INFINITY;
        for (int64_t i : geo.members((int64_t)s, false)) mn = std::min(mn, x.data[i]);
        true_min[s] = mn;
        ASSERT_GE(std::fabs(q.scale[s]), std::ldexp(1.0f, -14))
            << "test data should keep scales normal in fp16";
      }
      int64_t over = 0;
      for (size_t i = 0; i < d.size(); ++i) {
        const int64_t s = geo.param_index((int64_t)i, false);
        const double scale = q.scale[s], zero = q.zero[s];
        const double err = std::fabs((double)x.data[i] - (double)d[i]);
        const double bound = scale / 2 + std::fabs(zero - (double)true_min[s]);
        if (err > bound && over++ < 3)
          ADD_FAILURE() << "x=" << x.data[i] << " deq=" << d[i] << " bound=" << bound;
      }
      EXPECT_EQ(over, 0);
    }
}

// sym: code = clamp(rint(x / scale), -qmax, qmax), scale = absmax / qmax. Unclamped elements are
// within scale/2 (strictly, no slack); clamped ones dequantize to exactly +-qmax * scale. With
// fp32 params the clamp never bites by more than rounding (|x / scale| <= qmax + 0.5).
TEST(ErrorBound, SymWithinHalfStepExceptClamp) {
  for (ParamType params : {ParamType::F32, ParamType::F16})
    for (int bits = 2; bits <= 8; ++bits)
      for (Axis axis : {Axis::Channel, Axis::Token}) {
        SCOPED_TRACE(::testing::Message()
                     << "bits=" << bits << " axis=" << to_string(axis) << " params=" << to_string(params));
        const int qmax = (1 << (bits - 1)) - 1;
        const Tensor x = kvtest::random_kv({2, 96, 32}, 80 + bits);
        const QuantizedTensor q = quantize(x.view(), kvlab_spec(Scheme::Sym, bits, axis, 16, params));
        ASSERT_TRUE(q.zero.empty());
        const Geometry geo(q);
        const std::vector<uint8_t> codes = unpack_codes(q);
        const std::vector<float> d = dequantize(q);
        int64_t over = 0, bad_clamp = 0;
        for (size_t i = 0; i < d.size(); ++i) {
          const float scale = q.scale[geo.param_index((int64_t)i, false)];
          const float t = x.data[i] / scale;
          const double err = std::fabs((double)x.data[i] - (double)d[i]);
          if (std::fabs(t) > qmax + 0.5f) {
            if (params == ParamType::F32) ++bad_clamp;
            const int32_t v = kvtest::sign_extend(codes[i], bits);
            if (v != (t > 0 ? qmax : -qmax) || d[i] != (float)v * scale) ++bad_clamp;
            continue;
          }
          if (err > scale / 2.0 && over++ < 3)
            ADD_FAILURE() << "x=" << x.data[i] << " deq=" << d[i] << " scale=" << scale;
        }
        EXPECT_EQ(over, 0);
        EXPECT_EQ(bad_clamp, 0);
      }
}

// ---------------------------------------------------------------------------------------------
// Ties. asym: min mn, max mn + levels * s with s = 0.25, and the points mn + (k + 0.5) * s for
// k = 0..levels-1: every value is a multiple of 2^-3 below 64, so (x - mn) / s = k + 0.5 exactly
// in fp32 and the code must be the even one of k and k + 1; dequant = code * s + mn exactly.
TEST(Ties, AsymRoundHalfToEven) {
  for (float mn : {0.0f, -3.0f})
    for (int bits = 1; bits <= 8; ++bits)
      for (Axis axis : {Axis::Channel, Axis::Token}) {
        SCOPED_TRACE(::testing::Message() << "bits=" << bits << " axis=" << to_string(axis) << " min=" << mn);
        const int levels = (1 << bits) - 1;
        const float s = 0.25f;
        std::vector<float> row = {mn, mn + (float)levels * s};
        std::vector<uint32_t> want = {0, (uint32_t)levels};
        for (int k = 0; k < levels; ++k) {
          row.push_back(mn + ((float)k + 0.5f) * s);
          want.push_back(k % 2 == 0 ? k : k + 1);
        }
        const Tensor x = from_rows({row}, axis);
        const QuantizedTensor q =
            quantize(x.view(), kvlab_spec(Scheme::Asym, bits, axis, kWholeAxis, ParamType::F32));
        ASSERT_EQ(q.scale, std::vector<float>{s});
        const std::vector<uint8_t> codes = unpack_codes(q);
        const std::vector<float> d = dequantize(q);
        for (size_t i = 0; i < row.size(); ++i) {
          EXPECT_EQ(codes[i], want[i]) << "x=" << row[i];
          EXPECT_EQ(d[i], (float)want[i] * s + mn);
        }
      }
}

// sym: absmax = qmax * s with s = 0.5 gives scale s exactly; x = +-(k + 0.5) * s for
// k = 0..qmax-1 divide to +-(k + 0.5) exactly; the code is +-(the even one of k, k + 1).
TEST(Ties, SymRoundHalfToEven) {
  for (int bits = 2; bits <= 8; ++bits)
    for (Axis axis : {Axis::Channel, Axis::Token}) {
      SCOPED_TRACE(::testing::Message() << "bits=" << bits << " axis=" << to_string(axis));
      const int qmax = (1 << (bits - 1)) - 1;
      const float s = 0.5f;
      std::vector<float> row = {(float)qmax * s};
      std::vector<int32_t> want = {qmax};
      for (int k = 0; k < qmax; ++k)
        for (int sign : {1, -1}) {
          row.push_back((float)sign * ((float)k + 0.5f) * s);
          want.push_back(sign * (k % 2 == 0 ? k : k + 1));
        }
      const Tensor x = from_rows({row}, axis);
      const QuantizedTensor q =
          quantize(x.view(), kvlab_spec(Scheme::Sym, bits, axis, kWholeAxis, ParamType::F32));
      ASSERT_EQ(q.scale, std::vector<float>{s});
      const std::vector<uint8_t> codes = unpack_codes(q);
      const std::vector<float> d = dequantize(q);
      for (size_t i = 0; i < row.size(); ++i) {
        EXPECT_EQ(kvtest::sign_extend(codes[i], bits), want[i]) << "x=" << row[i];
        EXPECT_EQ(codes[i] >> bits, 0) << "two's complement in " << bits << " bits";
        EXPECT_EQ(d[i], (float)want[i] * s);
      }
    }
}

}  // namespace
