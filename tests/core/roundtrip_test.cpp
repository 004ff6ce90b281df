// Every format: the packed bytes re-pack from unpack_codes, and the stored params, the codes and
// the dequantized values are the ones the recipe implies (independent oracle in test_util.h).
// Shapes and groups per format:
//   (2, 37, 10): groups of 8 tokens (remainder 5), of 4 channels (remainder 2), whole axes;
//   long rows, past the 128-token chunks of the CPU loops: (1, 300, 12) with groups of all
//   300 tokens, 200 (remainder 100) and 129 (chunks that start mid-byte for odd widths), and
//   (3, 5, 300) per token with groups of all 300 channels and 129.
#include <gtest/gtest.h>

#include <sstream>
#include <vector>

#include "formats.h"
#include "kvlab/pack.h"
#include "kvlab/quantizer.h"
#include "test_util.h"

namespace {

using namespace kvlab;
using kvtest::Format;
using kvtest::Geometry;

struct Case {
  std::vector<int64_t> shape;
  int group;
};

std::vector<Case> cases_of(const Format& f) {
  const std::vector<int64_t> small = {2, 37, 10}, tall = {1, 300, 12}, wide = {3, 5, 300};
  if (f.boost >= 0) return {{small, 8}, {small, 16}, {tall, 129}, {tall, 200}};
  if (f.axis == Axis::Channel)
    return {{small, 8}, {small, kWholeAxis}, {tall, kWholeAxis}, {tall, 200}, {tall, 129}};
  return {{small, 4}, {small, kWholeAxis}, {wide, kWholeAxis}, {wide, 129}};
}

std::string trace(const Format& f, const Case& c) {
  return to_string(f.spec(c.group)) + " shape " + shape_string(c.shape);
}

// Code width of parameter group s: bits + 2 for boosted channels.
int width_of(const QuantizedTensor& q, int64_t s) {
  if (q.spec.boosted() && q.boost_index[s] != kNotBoosted) return boosted_bits(q.spec.bits);
  return q.spec.bits;
}

class FormatTest : public ::testing::TestWithParam<Format> {};

TEST_P(FormatTest, SizesAndRepackedBytes) {
  const Format f = GetParam();
  for (const Case& cs : cases_of(f)) {
    SCOPED_TRACE(trace(f, cs));
    const Tensor x = kvtest::random_kv(cs.shape, 11 + f.bits);
    const QuantizedTensor q = quantize(x.view(), f.spec(cs.group));
    const Geometry g(q);
    const std::vector<uint8_t> codes = unpack_codes(q);
    ASSERT_EQ(codes.size(), x.data.size());
    int64_t out_of_range = 0;
    for (size_t i = 0; i < codes.size(); ++i)
      out_of_range += codes[i] >> width_of(q, g.param_index(i, q.spec.boosted())) != 0;
    EXPECT_EQ(out_of_range, 0);

    if (!q.spec.boosted()) {
      const int64_t row_bytes = packed_bytes(g.L, f.bits);
      ASSERT_EQ((int64_t)q.codes.size(), g.N * g.R * row_bytes);
      ASSERT_EQ((int64_t)q.scale.size(), g.N * g.R * g.groups);
      ASSERT_EQ(q.zero.size(), f.scheme == Scheme::Asym ? q.scale.size() : 0u);
      EXPECT_TRUE(q.high.empty());
      EXPECT_TRUE(q.boost_index.empty());
      int64_t bad_rows = 0;
      for (int64_t n = 0; n < g.N; ++n)
        for (int64_t r = 0; r < g.R; ++r) {
          std::vector<uint8_t> row_codes(g.L), row(row_bytes, 0);
          for (int64_t i = 0; i < g.L; ++i)
            row_codes[i] = codes[g.channel ? g.elem(n, i, r) : g.elem(n, r, i)];
          pack_row(row_codes.data(), g.L, f.bits, row.data());
          bad_rows += !std::equal(row.begin(), row.end(), q.codes.begin() + (n * g.R + r) * row_bytes);
        }
      EXPECT_EQ(bad_rows, 0);
    } else {
      // pages of G tokens, page-major: low plane (D rows), high plane (k rows), index (D)
      const int k = boost_count((int)g.D, f.boost);
      EXPECT_EQ(q.boost_k, k);
      const int64_t P = g.groups;
      int64_t low_total = 0, high_total = 0;
      for (int64_t p = 0; p < P; ++p) {
        const int64_t len = std::min(g.G, g.T - p * g.G);
        low_total += g.D * packed_bytes(len, f.bits);
        high_total += k * packed_bytes(len, 2);
      }
      ASSERT_EQ((int64_t)q.codes.size(), g.N * low_total);
      ASSERT_EQ((int64_t)q.high.size(), g.N * high_total);
      ASSERT_EQ((int64_t)q.boost_index.size(), g.N * P * g.D);
      ASSERT_EQ((int64_t)q.scale.size(), g.N * P * g.D);
      ASSERT_EQ(q.zero.size(), q.scale.size());
      int64_t bad = 0, low_off = 0, high_off = 0;
      const uint32_t mask = (1u << f.bits) - 1u;
      for (int64_t n = 0; n < g.N; ++n)
        for (int64_t p = 0; p < P; ++p) {
          const int64_t t0 = p * g.G, len = std::min(g.G, g.T - t0);
          const uint8_t* index = &q.boost_index[(n * P + p) * g.D];
          int slots = 0;
          for (int64_t c = 0; c < g.D; ++c) {
            std::vector<uint8_t> lo(len), hi(len), low_row(packed_bytes(len, f.bits), 0),
                high_row(packed_bytes(len, 2), 0);
            for (int64_t t = 0; t < len; ++t) {
              lo[t] = codes[g.elem(n, t0 + t, c)] & mask;
              hi[t] = codes[g.elem(n, t0 + t, c)] >> f.bits;
            }
            pack_row(lo.data(), len, f.bits, low_row.data());
            bad +=
                !std::equal(low_row.begin(), low_row.end(), q.codes.begin() + low_off + c * low_row.size());
            if (index[c] != kNotBoosted) {
              ++slots;
              pack_row(hi.data(), len, 2, high_row.data());
              bad += !std::equal(high_row.begin(), high_row.end(),
                                 q.high.begin() + high_off + index[c] * high_row.size());
            }
          }
          EXPECT_EQ(slots, k);
          low_off += g.D * packed_bytes(len, f.bits);
          high_off += k * packed_bytes(len, 2);
        }
      EXPECT_EQ(bad, 0);
    }
  }
}

TEST_P(FormatTest, ParamsCodesAndDequantAreTheRecipes) {
  const Format f = GetParam();
  for (const Case& cs : cases_of(f)) {
    const QuantizerSpec spec = f.spec(cs.group);
    SCOPED_TRACE(trace(f, cs));
    const Tensor x = kvtest::random_kv(cs.shape, 101 + f.bits);
    const QuantizedTensor q = quantize(x.view(), spec);
    const Geometry g(q);
    const bool boosted = spec.boosted();
    const std::vector<uint8_t> codes = unpack_codes(q);
    const std::vector<float> deq = dequantize(q);
    const std::vector<uint16_t> deq_half = dequantize_half(q);

    if (boosted)
      for (int64_t n = 0; n < g.N; ++n)
        for (int64_t p = 0; p < g.groups; ++p) {
          const auto want = kvtest::oracle_boost_index(spec, x.data, g, n, p, q.boost_k);
          EXPECT_TRUE(std::equal(want.begin(), want.end(), q.boost_index.begin() + (n * g.groups + p) * g.D))
              << "boosted channels of slice " << n << " page " << p;
        }

    int64_t bad_params = 0;
    for (size_t s = 0; s < q.scale.size(); ++s) {
      float mn = INFINITY, mx = -INFINITY;
      for (int64_t i : g.members((int64_t)s, boosted)) {
        const float v = kvtest::load(spec.profile, x.data[i]);
        mn = std::min(mn, v);
        mx = std::max(mx, v);
      }
      const kvtest::Params want = kvtest::oracle_params(spec, mn, mx, width_of(q, (int64_t)s));
      const bool ok =
          kvtest::bits_of(q.scale[s]) == kvtest::bits_of(want.scale) &&
          (spec.scheme == Scheme::Sym || kvtest::bits_of(q.zero[s]) == kvtest::bits_of(want.zero));
      if (!ok && bad_params++ < 3)
        ADD_FAILURE() << "group " << s << " [" << mn << ", " << mx << "]: scale " << q.scale[s] << " want "
                      << want.scale << ", zero " << (q.zero.empty() ? 0.f : q.zero[s]) << " want "
                      << want.zero;
    }
    EXPECT_EQ(bad_params, 0);

    int64_t bad_codes = 0, bad_deq = 0, bad_half = 0;
    for (size_t i = 0; i < codes.size(); ++i) {
      const int64_t s = g.param_index((int64_t)i, boosted);
      const kvtest::Params p{q.scale[s], spec.scheme == Scheme::Asym ? q.zero[s] : 0.0f};
      const int w = width_of(q, s);
      const uint32_t want = kvtest::oracle_code(spec, kvtest::load(spec.profile, x.data[i]), p, w);
      if (codes[i] != want && bad_codes++ < 3)
        ADD_FAILURE() << "element " << i << " x=" << x.data[i] << ": code " << (int)codes[i] << " want "
                      << want;
      const float d = kvtest::oracle_dequant(spec, codes[i], p, w);
      if (kvtest::bits_of(deq[i]) != kvtest::bits_of(d) && bad_deq++ < 3)
        ADD_FAILURE() << "element " << i << ": dequant " << deq[i] << " want " << d;
      bad_half += deq_half[i] != kvtest::gcc_half_bits(deq[i]);
    }
    EXPECT_EQ(bad_codes, 0);
    EXPECT_EQ(bad_deq, 0);
    EXPECT_EQ(bad_half, 0);
    // the pointer forms write the same values into caller memory
    std::vector<float> into(deq.size(), -1.0f);
    std::vector<uint16_t> into_half(deq.size(), 0xffff);
    dequantize(q, into.data());
    dequantize_half(q, into_half.data());
    EXPECT_EQ(into, deq);
    EXPECT_EQ(into_half, deq_half);
  }
}

TEST_P(FormatTest, Fp16InputMatchesItsFp32Conversion) {
  // fp16 input converts to fp32 exactly, so both dtypes must give the same bytes.
  const Format f = GetParam();
  for (const Case& cs : cases_of(f)) {
    SCOPED_TRACE(trace(f, cs));
    const Tensor x = kvtest::rounded_to_half(kvtest::random_kv(cs.shape, 7 + f.bits));
    const std::vector<uint16_t> hb = kvtest::half_bits_of(x);
    const QuantizedTensor a = quantize(x.view(), f.spec(cs.group));
    const QuantizedTensor b = quantize(kvtest::half_view(hb, cs.shape), f.spec(cs.group));
    EXPECT_EQ(a.codes, b.codes);
    EXPECT_EQ(a.scale, b.scale);
    EXPECT_EQ(a.zero, b.zero);
    EXPECT_EQ(a.high, b.high);
    EXPECT_EQ(a.boost_index, b.boost_index);
    EXPECT_EQ(dequantize(a), dequantize(b));
  }
}

INSTANTIATE_TEST_SUITE_P(AllFormats, FormatTest, ::testing::ValuesIn(kvtest::all_formats()),
                         [](const ::testing::TestParamInfo<Format>& info) { return info.param.name(); });

}  // namespace
