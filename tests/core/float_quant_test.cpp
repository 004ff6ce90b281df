// The scaled floating-point formats (float_quant.h): hand-checked NVFP4 and MXFP4 blocks, FP8
// scale granularities, nibble packing, calibrated scales, specs, the fp4 method family.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>
#include <vector>

#include "kvlab/float_quant.h"
#include "kvlab/method.h"
#include "test_util.h"

namespace {

using namespace kvlab;

TEST(FloatQuant, NvFp4HandCheckedBlocks) {
  // One token of D = 32: two blocks of 16. Tensor amax 2688 -> s_t = 2688 / (448 * 6) = 1.
  std::vector<float> x(32, 0.0f);
  // block 0: amax 2688 -> block scale e4m3(2688 / 6 / 1) = 448 (code 0x7E); x / 448:
  x[0] = 2688.0f;   // 6        -> code 7
  x[1] = -1344.0f;  // -3       -> code 0xD
  x[2] = 1120.0f;   // 2.5: tie between 2 (100) and 3 (101) -> 2, code 4
  x[3] = 100.0f;    // 0.223    -> 0
  x[4] = 134.4f;    // 0.3      -> 0.5, code 1
  // block 1: amax 12 -> block scale e4m3(2) = 2 (code 0x40); x / 2:
  x[16] = 12.0f;  // 6   -> 7
  x[17] = 7.0f;   // 3.5: tie between 3 (101) and 4 (110) -> 4, code 6
  x[18] = -1.0f;  // -0.5 -> code 9
  const Tensor t = kvtest::make_tensor({1, 32}, x);
  const FloatQuantized q = quantize_float(t.view(), parse_float_spec("fmt=nvfp4"));
  ASSERT_EQ(q.scale, std::vector<float>{1.0f});
  ASSERT_EQ(q.block_scale, (std::vector<uint8_t>{0x7E, 0x40}));
  ASSERT_EQ(q.codes.size(), 16u);
  EXPECT_EQ(q.codes[0], 0xD7);  // x[0] low nibble 7, x[1] high nibble 0xD
  EXPECT_EQ(q.codes[1], 0x04);  // x[2] -> 4, x[3] -> 0
  EXPECT_EQ(q.codes[2], 0x01);  // x[4] -> 1, x[5] = 0
  EXPECT_EQ(q.codes[8], 0x67);  // x[16] -> 7, x[17] -> 6
  EXPECT_EQ(q.codes[9], 0x09);  // x[18] -> 9 (-0.5)
  const std::vector<float> d = dequantize_float(q);
  EXPECT_EQ(d[0], 2688.0f);
  EXPECT_EQ(d[1], -1344.0f);
  EXPECT_EQ(d[2], 896.0f);  // 2 * 448
  EXPECT_EQ(d[3], 0.0f);
  EXPECT_EQ(d[4], 224.0f);
  EXPECT_EQ(d[17], 8.0f);
  EXPECT_EQ(d[18], -1.0f);
}

TEST(FloatQuant, MxFp4HandCheckedBlocksAndTheClampOfOcpMx) {
  // D = 40: blocks of 32 and 8. Block 0 amax 14: X = 2^(floor(log2 14) - 2) = 2, E8M0 code 128;
  // 14 / 2 = 7 lies beyond E2M1's 6 and is clamped (OCP MX v1.0 section 6.3) -> 12.
  std::vector<float> x(40, 0.0f);
  x[0] = 14.0f;
  x[1] = -5.0f;    // -2.5: tie -> -2 (code 0xC) -> -4
  x[2] = 0.5f;     // 0.25: tie -> 0
  x[32] = 0.375f;  // block 1: amax 0.375 -> floor(log2) = -2 -> X = 2^-4, code 123; 6 -> code 7
  x[33] = 0.1f;    // 1.6 -> 1.5 (code 3)
  const Tensor t = kvtest::make_tensor({1, 1, 40}, x);
  const FloatQuantized q = quantize_float(t.view(), parse_float_spec("fmt=mxfp4"));
  EXPECT_TRUE(q.scale.empty());
  ASSERT_EQ(q.block_scale, (std::vector<uint8_t>{128, 123}));
  EXPECT_EQ(q.codes[0], 0xC7);
  EXPECT_EQ(q.codes[1], 0x00);
  EXPECT_EQ(q.codes[16], 0x37);
  const std::vector<float> d = dequantize_float(q);
  EXPECT_EQ(d[0], 12.0f);
  EXPECT_EQ(d[1], -4.0f);
  EXPECT_EQ(d[2], 0.0f);
  EXPECT_EQ(d[32], 0.375f);
  EXPECT_EQ(d[33], 0.09375f);
  // an all-zero block: code 0 (2^-127), zeros back
  const Tensor z = kvtest::make_tensor({2, 4}, std::vector<float>(8, 0.0f));
  const FloatQuantized qz = quantize_float(z.view(), parse_float_spec("fmt=mxfp4"));
  EXPECT_EQ(qz.block_scale, (std::vector<uint8_t>{0, 0}));
  EXPECT_EQ(dequantize_float(qz), std::vector<float>(8, 0.0f));
}

TEST(FloatQuant, OddHeadDimPacksNibblesPerTokenRow) {
  // D = 5: 3 bytes per token, the last high nibble zero; blocks shorter than 16 hold D values
  // the E2M1 grid times 448: s_t = 2688 / 2688 = 1, block scale e4m3(2688 / 6) = 448, exact
  const Tensor t = kvtest::make_tensor({2, 5}, {2688, 1344, 896, 448, 224, -2688, -1344, -896, -448, -224});
  const FloatQuantized q = quantize_float(t.view(), parse_float_spec("fmt=nvfp4"));
  EXPECT_EQ(q.block_scale, (std::vector<uint8_t>{0x7E, 0x7E}));
  EXPECT_EQ(q.codes, (std::vector<uint8_t>{0x57, 0x24, 0x01, 0xDF, 0xAC, 0x09}));
  EXPECT_EQ(dequantize_float(q), t.data);
  EXPECT_DOUBLE_EQ(float_packed_bits({2, 5}, parse_float_spec("fmt=nvfp4")), 10 * 4 + 2 * 8 + 32);
}

// The row encoder (passes over whole rows, vectorized) against the recipe applied one element
// at a time, on random rows of every kind (zeros, tiny, huge, subnormal, any finite bits) for
// widths with and without a partial last block.
TEST(FloatQuant, Fp4RowsEqualTheRecipeElementByElement) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  for (const char* fmt : {"fmt=nvfp4", "fmt=mxfp4"})
    for (int64_t D : {1, 15, 16, 17, 33, 100, 128}) {
      const int64_t T = 64;
      std::vector<float> x(T * D);
      for (int64_t t = 0; t < T; ++t) {
        const float scale = std::ldexp(1.0f, (int)(rng() % 100) - 50);
        for (int64_t c = 0; c < D; ++c) {
          float& v = x[t * D + c];
          switch (t % 4) {
            case 0: v = normal(rng) * scale; break;
            case 1: v = rng() % 3 == 0 ? 0.0f : normal(rng); break;
            case 2: v = bits_float(rng() & 0x807fffffu); break;  // subnormals and zeros
            default: {
              uint32_t u;
              do u = rng();
              while ((u & 0x7f800000u) == 0x7f800000u);  // any finite float
              v = bits_float(u);
            }
          }
        }
      }
      const FloatSpec spec = parse_float_spec(fmt);
      const FloatLayout L = make_float_layout({T, D}, spec);
      const Tensor t = kvtest::make_tensor({T, D}, x);
      const FloatQuantized q = quantize_float(t.view(), spec);
      const float s_t = spec.format == FloatFormat::NVFP4 ? q.scale.at(0) : 0.0f;
      for (int64_t r = 0; r < T; ++r)
        for (int64_t c = 0; c < D; ++c) {
          const int64_t b = c / L.block();
          const float* blk = &x[r * D + b * L.block()];
          float amax = 0.0f;
          for (int64_t j = 0; j < std::min<int64_t>(L.block(), D - b * L.block()); ++j)
            amax = std::max(amax, std::fabs(blk[j]));
          const uint8_t bs =
              spec.format == FloatFormat::NVFP4 ? nvfp4_block_code(amax, s_t) : mxfp4_block_code(amax);
          const float S =
              spec.format == FloatFormat::NVFP4 ? nvfp4_block_scale(bs, s_t) : mxfp4_block_scale(bs);
          ASSERT_EQ(q.block_scale[r * L.blocks() + b], bs)
              << fmt << " D " << D << " row " << r << " block " << b;
          const uint8_t code = (q.codes[r * L.row_bytes() + c / 2] >> (4 * (c % 2))) & 0xF;
          ASSERT_EQ(code, fp4_code(x[r * D + c], S)) << fmt << " D " << D << " row " << r << " channel " << c;
        }
    }
}

TEST(FloatQuant, Fp8ScaleGranularities) {
  // (N=2, T=2, D=2): per tensor one absmax; per head one per slice; per channel one per (n, c).
  // Multiples of 7 * 2^k, so every scale and quotient is exact.
  const Tensor t = kvtest::make_tensor({2, 2, 2}, {448, 1, -2, 3.5f, 7, -14, 0.5f, 0.25f});
  auto scales = [&](const char* spec) { return float_scales(t.view(), parse_float_spec(spec)); };
  EXPECT_EQ(scales("fmt=e4m3,scale=tensor"), std::vector<float>{1.0f});
  EXPECT_EQ(scales("fmt=e4m3,scale=head"), (std::vector<float>{1.0f, 1.0f / 32}));
  EXPECT_EQ(scales("fmt=e4m3,scale=channel"), (std::vector<float>{1.0f, 1.0f / 128, 1.0f / 64, 1.0f / 32}));
  EXPECT_EQ(scales("fmt=e5m2,scale=head"), (std::vector<float>{1.0f / 128, 1.0f / 4096}));
  // per channel, each channel's absmax is the top of its grid
  const FloatQuantized q = quantize_float(t.view(), parse_float_spec("fmt=e4m3,scale=channel"));
  const std::vector<float> d = dequantize_float(q);
  EXPECT_EQ(d[0], 448.0f);
  EXPECT_EQ(d[3], 3.5f);
  EXPECT_EQ(d[5], -14.0f);
  EXPECT_EQ(q.codes[5], 0xFE);  // -max
  // fp16 output is the fp32 result rounded to fp16
  const std::vector<uint16_t> h = dequantize_float_half(q);
  for (size_t i = 0; i < d.size(); ++i) EXPECT_EQ(kvtest::gcc_half_to_float(h[i]), kvtest::h16(d[i]));
}

TEST(FloatQuant, PercentileAndGivenScales) {
  // 100 values 1..100 in one head: the 99th percentile (nearest rank) is 99, the 50th is 50
  std::vector<float> x(100);
  for (int i = 0; i < 100; ++i) x[i] = (float)(i + 1) * (i % 2 ? -1.0f : 1.0f);
  const Tensor t = kvtest::make_tensor({100, 1}, x);
  const FloatSpec s = parse_float_spec("fmt=e4m3");
  EXPECT_EQ(float_scales(t.view(), s, {99.0}), std::vector<float>{99.0f / 448.0f});
  EXPECT_EQ(float_scales(t.view(), s, {50.0}), std::vector<float>{50.0f / 448.0f});
  EXPECT_EQ(float_scales(t.view(), s, {100.0}), std::vector<float>{100.0f / 448.0f});
  // values beyond the calibrated absmax saturate at +-448 * scale
  const FloatQuantized q = quantize_float(t.view(), s, {50.0f / 448.0f});  // the 50th percentile's
  const std::vector<float> d = dequantize_float(q);
  const float sc = 50.0f / 448.0f;
  EXPECT_EQ(d[99], -448.0f * sc);
  EXPECT_EQ(d[98], 448.0f * sc);
  EXPECT_EQ(d[0], 9.0f * sc);  // 1 / sc = 8.96: e4m3 spacing 1 in [8, 16) -> 9
  EXPECT_THROW(quantize_float(t.view(), s, {0.0f}), std::invalid_argument);
  EXPECT_THROW(quantize_float(t.view(), s, {1.0f, 2.0f}), std::invalid_argument);
  EXPECT_THROW(float_scales(t.view(), s, {0.0}), std::invalid_argument);
}

TEST(FloatQuant, SpecsRoundTripAndErrorsNameTheKey) {
  for (const char* text :
       {"fmt=e4m3,scale=head", "fmt=e5m2,scale=channel", "fmt=e4m3,scale=tensor", "fmt=nvfp4", "fmt=mxfp4"})
    EXPECT_EQ(to_string(parse_float_spec(text)), text);
  EXPECT_EQ(to_string(parse_float_spec("")), "fmt=e4m3,scale=head");
  auto message = [](const char* text) {
    try {
      parse_float_spec(text);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message("fmt=e3m4").find("e4m3, e5m2, nvfp4, mxfp4"), std::string::npos);
  EXPECT_NE(message("fmt=nvfp4,scale=head").find("scale="), std::string::npos);
  EXPECT_NE(message("bits=4").find("fmt, scale"), std::string::npos);
  const Tensor bad = kvtest::make_tensor({1, 2}, {1.0f, NAN});
  EXPECT_THROW(quantize_float(bad.view(), FloatSpec{}), std::invalid_argument);
}

TEST(Fp4Method, ThroughTheRegistry) {
  const MethodPtr nv = parse_method("nvfp4"), mx = parse_method("mxfp4");
  EXPECT_EQ(nv->spec(), "fp4:fmt=nv");
  EXPECT_EQ(mx->spec(), "fp4:fmt=mx");
  EXPECT_TRUE(*parse_method("fp4") == *nv);
  EXPECT_TRUE(*parse_method(mx->spec()) == *mx);
  // bits: 4 per code + 8 per block of 16 (nv) / 32 (mx) + nv's fp32 tensor scale per head
  EXPECT_DOUBLE_EQ(nv->bits(4096, 128).key, 4.0 + 8.0 / 16 + 32.0 / (4096.0 * 128));
  EXPECT_DOUBLE_EQ(mx->bits(4096, 128).value, 4.0 + 8.0 / 32);
  EXPECT_DOUBLE_EQ(nv->bits(10, 8).key, 4.0 + 8.0 / 8 + 32.0 / 80);  // D = 8: one short block per token
  const Schedule s = nv->schedule(50);
  EXPECT_EQ(s.key_begin, 0);
  EXPECT_EQ(s.value_end, 50);
  // apply equals the format's round trip of each role
  const Tensor k = kvtest::random_kv({2, 40, 32}, 3), v = kvtest::random_kv({2, 40, 32}, 4);
  const Reconstruction r = mx->apply(k.view(), v.view());
  EXPECT_EQ(r.k.data, dequantize_float(quantize_float(k.view(), parse_float_spec("fmt=mxfp4"))));
  EXPECT_EQ(r.v.data, dequantize_float(quantize_float(v.view(), parse_float_spec("fmt=mxfp4"))));
  EXPECT_THROW(parse_method("fp4:fmt=e2m1"), std::invalid_argument);
  EXPECT_THROW(parse_method("fp4:scale=head"), std::invalid_argument);
}

}  // namespace
