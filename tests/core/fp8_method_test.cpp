// The fp8 method family: hand-checked rounding on the e4m3 and e5m2 grids, and the family
// through the registry (spec round trip, schedule, bits, errors).
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <vector>

#include "kvlab/method.h"
#include "test_util.h"

namespace {

using namespace kvlab;

// fp8 of one head (1, 1, n) of keys; values are the same numbers. With 448 (e4m3) or 57344
// (e5m2) as the absmax the scale is exactly 1, so the outputs are the grid points themselves.
std::vector<float> keys_after(const std::string& method, std::vector<float> x) {
  const int64_t n = x.size();
  const Tensor t = kvtest::make_tensor({1, 1, n}, x);
  return parse_method(method)->apply(t.view(), t.view()).k.data;
}

std::vector<float> values_after(const std::string& method, std::vector<float> x) {
  const int64_t n = x.size();
  const Tensor t = kvtest::make_tensor({1, 1, n}, x);
  return parse_method(method)->apply(t.view(), t.view()).v.data;
}

TEST(Fp8Method, E4M3RoundsToNearestEvenOnTheGrid) {
  const float s = std::ldexp(1.0f, -9);     // subnormal spacing of e4m3
  const std::vector<float> in = {448.0f,    // the absmax: scale 1, and max stays max
                                 1.0f,      // grid points stay exact
                                 1.125f,    //
                                 1.0625f,   // midpoint of 1 (mantissa 000) and 1.125 (001): even -> 1
                                 1.1875f,   // midpoint of 1.125 (001) and 1.25 (010): even -> 1.25
                                 -1.0625f,  // the same for negatives
                                 400.0f,    // midpoint of 384 (100) and 416 (101) -> 384
                                 432.0f,    // midpoint of 416 (101) and 448 (110) -> 448
                                 s,         // the smallest subnormal stays
                                 1.5f * s,  // midpoint of 1*s (odd) and 2*s (even) -> 2*s
                                 2.5f * s,  // midpoint of 2*s and 3*s -> 2*s
                                 0.5f * s,  // midpoint of 0 and s -> 0
                                 0.6f * s,  // nearer to s
                                 std::ldexp(1.0f, -6) + s,  // smallest normal binade: spacing 2^-9
                                 0.0f};
  const std::vector<float> want = {448.0f, 1.0f, 1.125f, 1.0f,  1.25f, -1.0f, 384.0f,
                                   448.0f, s,    2 * s,  2 * s, 0.0f,  s,     std::ldexp(1.0f, -6) + s,
                                   0.0f};
  const std::vector<float> got = keys_after("fp8-e4m3", in);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i], want[i]) << "input " << in[i];
}

TEST(Fp8Method, E5M2RoundsToNearestEvenOnTheGrid) {
  const float s = std::ldexp(1.0f, -16);  // subnormal spacing of e5m2
  const std::vector<float> in = {57344.0f, 1.25f, 1.125f, 1.375f, 49152.0f, 53248.0f, s, 1.5f * s, 0.5f * s};
  // 1.125: between 1 (00) and 1.25 (01) -> 1; 1.375: between 1.25 (01) and 1.5 (10) -> 1.5;
  // 53248: midpoint of 49152 (10) and 57344 (11) -> 49152
  const std::vector<float> want = {57344.0f, 1.25f, 1.0f, 1.5f, 49152.0f, 49152.0f, s, 2 * s, 0.0f};
  const std::vector<float> got = values_after("fp8:vfmt=e5m2", in);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i], want[i]) << "input " << in[i];
  // the keys of the same method stay e4m3 with scale 57344 / 448 = 128: 1.375 / 128 =
  // 5.5 * 2^-9 lies in e4m3's subnormals, a tie -> 6 * 2^-9 (even) -> 1.5 after the scale
  EXPECT_EQ(keys_after("fp8:vfmt=e5m2", in)[3], 1.5f);
}

TEST(Fp8Method, ScaleIsAbsmaxOverMaxPerHeadAndTheTopSaturates) {
  // Two heads with different absmax: each head's absmax comes back as max * scale, with
  // scale = absmax / 448 in fp32 (never the next grid point 480, never beyond max).
  const std::vector<float> x = {1000.0f, -3.0f, 0.5f, 2.0f, 1e-3f, -0.007f, 0.002f, 0.0f};
  const Tensor t = kvtest::make_tensor({2, 1, 4}, x);
  const Reconstruction r = parse_method("fp8-e4m3")->apply(t.view(), t.view());
  const float s0 = 1000.0f / 448.0f, s1 = 0.007f / 448.0f;
  EXPECT_EQ(r.k.data[0], 448.0f * s0);
  EXPECT_EQ(r.k.data[5], -448.0f * s1);
  // an element below the absmax: its quotient rounded on the grid, times the scale
  const float y = 3.0f / s0;  // 1.344: spacing 0.125 -> 1.375
  EXPECT_TRUE(y > 1.3125f && y < 1.4375f) << y;
  EXPECT_EQ(r.k.data[1], -1.375f * s0);
  // an all-zero head keeps scale 1 and stays zero
  const Tensor z = kvtest::make_tensor({1, 2, 2}, std::vector<float>(4, 0.0f));
  const Reconstruction rz = parse_method("fp8-e4m3")->apply(z.view(), z.view());
  EXPECT_EQ(rz.k.data, std::vector<float>(4, 0.0f));
}

TEST(Fp8Method, Fp16InputEqualsItsFp32Values) {
  const Tensor k = kvtest::rounded_to_half(kvtest::random_kv({2, 64, 16}, 21));
  const Tensor v = kvtest::rounded_to_half(kvtest::random_kv({2, 64, 16}, 22));
  const auto kb = kvtest::half_bits_of(k), vb = kvtest::half_bits_of(v);
  const MethodPtr m = parse_method("fp8:kfmt=e5m2");
  const Reconstruction a = m->apply(k.view(), v.view());
  const Reconstruction b = m->apply(kvtest::half_view(kb, k.shape), kvtest::half_view(vb, v.shape));
  EXPECT_EQ(a.k.data, b.k.data);
  EXPECT_EQ(a.v.data, b.v.data);
}

TEST(Fp8Method, ThroughTheRegistry) {
  const MethodPtr m = parse_method("fp8-e4m3");
  EXPECT_EQ(m->family(), "fp8");
  EXPECT_EQ(m->spec(), "fp8:kfmt=e4m3,vfmt=e4m3,scale=head,calib=dynamic,calib_tokens=half");
  EXPECT_TRUE(*parse_method("fp8:kfmt=e4m3,vfmt=e4m3") == *m);  // the spec published before scale/calib
  EXPECT_TRUE(*parse_method(m->spec()) == *m);
  EXPECT_TRUE(*parse_method("fp8") == *m);  // the defaults
  for (const char* text : {"fp8:kfmt=e5m2", "fp8:vfmt=e5m2", "fp8:vfmt=e5m2,kfmt=e5m2"}) {
    const MethodPtr x = parse_method(text);
    EXPECT_TRUE(*parse_method(x->spec()) == *x) << text;
    EXPECT_FALSE(*x == *m) << text;
  }
  EXPECT_EQ(parse_method("fp8:vfmt=e5m2,kfmt=e5m2")->spec(),
            "fp8:kfmt=e5m2,vfmt=e5m2,scale=head,calib=dynamic,calib_tokens=half");
  EXPECT_TRUE(*parse_method("fp8:fmt=e5m2") == *parse_method("fp8:vfmt=e5m2,kfmt=e5m2"));
  for (const char* text :
       {"fp8:scale=channel,calib=percentile:99.9", "fp8:scale=tensor,calib=max,calib_tokens=64"}) {
    const MethodPtr x = parse_method(text);
    EXPECT_TRUE(*parse_method(x->spec()) == *x) << text;
  }
  EXPECT_EQ(parse_method("fp8:calib=percentile:99.9")->spec(),
            "fp8:kfmt=e4m3,vfmt=e4m3,scale=head,calib=percentile:99.9,calib_tokens=half");
  // every token quantized; 8 bits plus one fp32 scale per head and role
  const Schedule s = m->schedule(300);
  EXPECT_EQ(s.key_begin, 0);
  EXPECT_EQ(s.key_end, 300);
  EXPECT_EQ(s.value_begin, 0);
  EXPECT_EQ(s.value_end, 300);
  const Bits b = m->bits(4, 8);
  EXPECT_DOUBLE_EQ(b.key, 9.0);  // 8 + 32 / 32
  EXPECT_DOUBLE_EQ(b.value, 9.0);
  EXPECT_DOUBLE_EQ(m->bits(4096, 128).both(), 8.0 + 32.0 / (4096.0 * 128.0));
  EXPECT_FALSE(m->key_quantizer().has_value());
  // listed with its preset, and bad keys or formats name the valid ones
  bool listed = false;
  for (const Preset& p : presets()) listed = listed || (p.name == "fp8-e4m3" && p.spec == m->spec());
  EXPECT_TRUE(listed);
  ASSERT_NE(find_method_family("fp8"), nullptr);
  try {
    parse_method("fp8:kfmt=e3m4");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("e4m3, e5m2"), std::string::npos) << e.what();
  }
  try {
    parse_method("fp8:bits=8");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("kfmt, vfmt, fmt, scale, calib, calib_tokens"), std::string::npos)
        << e.what();
  }
  for (const char* bad : {"fp8:kfmt=nvfp4", "fp8:calib=percentile:0", "fp8:calib=percentile:101",
                          "fp8:calib=mean", "fp8:calib_tokens=0", "fp8:scale=block"})
    EXPECT_THROW(parse_method(bad), std::invalid_argument) << bad;
}

// Calibrated scales come from the first half of the tokens (or calib_tokens), which the
// schedule leaves out; the other tokens are quantized with those scales and saturate beyond.
TEST(Fp8Method, CalibratedScalesLearnFromTheFirstTokensOnly) {
  // one head, T = 4, D = 2: tokens 0-1 have absmax 7, tokens 2-3 reach 14
  const Tensor t = kvtest::make_tensor({1, 4, 2}, {7.0f, -3.5f, 1.75f, 0.875f, 14.0f, -7.0f, 3.5f, 0.0f});
  const MethodPtr cal = parse_method("fp8:calib=max");
  const Reconstruction r = cal->apply(t.view(), t.view());
  const float s = 7.0f / 448.0f;  // exact: 2^-6
  EXPECT_EQ(r.k.data[0], 7.0f);
  EXPECT_EQ(r.k.data[4], 448.0f * s);  // 14 saturates at the calibrated max, 7
  EXPECT_EQ(r.k.data[5], -7.0f);
  EXPECT_EQ(r.k.data[6], 3.5f);
  const Schedule sc = cal->schedule(4);
  EXPECT_EQ(sc.key_begin, 2);  // the calibration tokens are not evaluated
  EXPECT_EQ(sc.key_end, 4);
  EXPECT_EQ(sc.value_begin, 2);
  // dynamic: every token evaluated, the absmax of all tokens (14) tops the grid
  const Reconstruction d = parse_method("fp8-e4m3")->apply(t.view(), t.view());
  EXPECT_EQ(d.k.data[4], 14.0f);
  EXPECT_EQ(parse_method("fp8-e4m3")->schedule(4).key_begin, 0);
  // calib_tokens=3 takes token 2 in: absmax 14
  EXPECT_EQ(parse_method("fp8:calib=max,calib_tokens=3")->apply(t.view(), t.view()).k.data[4], 14.0f);
  // the 50th percentile of |x| over tokens 0-1 (0.875, 1.75, 3.5, 7): rank 2 -> 1.75
  const Reconstruction p = parse_method("fp8:calib=percentile:50")->apply(t.view(), t.view());
  EXPECT_EQ(p.k.data[2], 1.75f);
  EXPECT_EQ(p.k.data[0], 1.75f);  // saturated at the percentile
  // too few tokens for a calibration split
  const Tensor one = kvtest::make_tensor({1, 1, 2}, {1.0f, 2.0f});
  EXPECT_THROW(cal->apply(one.view(), one.view()), std::invalid_argument);
  EXPECT_THROW(parse_method("fp8:calib=max,calib_tokens=4")->apply(t.view(), t.view()),
               std::invalid_argument);
}

}  // namespace
