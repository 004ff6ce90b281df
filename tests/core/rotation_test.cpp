// rot=hadamard on the uniform families: a hand-checked rotation of order 4, the round trip,
// that the codes are the rotated tensor's, the fp16 ranges untouched, specs and bits.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <vector>

#include "../../core/src/methods/rotation.h"
#include "kvlab/method.h"
#include "kvlab/quantizer.h"
#include "test_util.h"

namespace {

using namespace kvlab;

TEST(Rotation, HandCheckedOrderFour) {
  // H4 = [[1,1,1,1],[1,-1,1,-1],[1,1,-1,-1],[1,-1,-1,1]] / 2; y = H4 diag(s) x
  const uint64_t seed = 7;
  std::vector<float> s(4);
  for (int c = 0; c < 4; ++c) s[c] = methods::hadamard_sign(seed, c);
  std::vector<float> x = {1.0f, 2.0f, 3.0f, 4.0f};
  const float a = s[0] * 1, b = s[1] * 2, c = s[2] * 3, d = s[3] * 4;
  const std::vector<float> want = {(a + b + c + d) / 2, (a - b + c - d) / 2, (a + b - c - d) / 2,
                                   (a - b - c + d) / 2};
  methods::hadamard_rows(x.data(), 1, 4, seed, false);
  EXPECT_EQ(x, want);  // small integers: every step exact, 1/sqrt(4) = 0.5
  methods::hadamard_rows(x.data(), 1, 4, seed, true);
  EXPECT_EQ(x, (std::vector<float>{1.0f, 2.0f, 3.0f, 4.0f}));
  // the signs are not all equal for this seed over 128 channels (the seed matters)
  int minus = 0;
  for (int c2 = 0; c2 < 128; ++c2) minus += methods::hadamard_sign(seed, c2) < 0;
  EXPECT_GT(minus, 32);
  EXPECT_LT(minus, 96);
  std::vector<float> bad(6);
  EXPECT_THROW(methods::hadamard_rows(bad.data(), 1, 6, 0, false), std::invalid_argument);
}

TEST(Rotation, RoundTripWithinAFewUlpsAndSpreadsAnOutlier) {
  const Tensor t = kvtest::random_kv({4, 128}, 11);
  std::vector<float> y = t.data;
  methods::hadamard_rows(y.data(), 4, 128, 3, false);
  std::vector<float> back = y;
  methods::hadamard_rows(back.data(), 4, 128, 3, true);
  for (size_t i = 0; i < back.size(); ++i)
    EXPECT_NEAR(back[i], t.data[i], 1e-5f * (1.0f + std::fabs(t.data[i]))) << i;
  // one outlier channel of 100: after rotation every channel holds +-100/sqrt(128) = 8.84
  std::vector<float> spike(128, 0.0f);
  spike[5] = 100.0f;
  methods::hadamard_rows(spike.data(), 1, 128, 3, false);
  for (float v : spike) EXPECT_NEAR(std::fabs(v), 100.0f / std::sqrt(128.0f), 1e-4f);
}

TEST(Rotation, CodesAreTheRotatedTensorsAndFp16RangesStay) {
  // kivi-2 with rot: the quantized key range equals rotate-back(dequantize(quantize(rotate(k))))
  const Tensor k = kvtest::rounded_to_half(kvtest::random_kv({1, 300, 16}, 5));
  const Tensor v = kvtest::rounded_to_half(kvtest::random_kv({1, 300, 16}, 6));
  const MethodPtr m = parse_method("kivi:rot=hadamard:9");
  const Reconstruction r = m->apply(k.view(), v.view());
  const Schedule s = m->schedule(300);  // keys [0, 256), values [0, 172)
  Tensor part{{1, s.key_end, 16}, std::vector<float>(k.data.begin(), k.data.begin() + s.key_end * 16)};
  methods::hadamard_rows(part.data.data(), s.key_end, 16, 9, false);
  std::vector<float> want = dequantize(quantize(part.view(), *m->key_quantizer()));
  methods::hadamard_rows(want.data(), s.key_end, 16, 9, true);
  EXPECT_EQ(std::vector<float>(r.k.data.begin(), r.k.data.begin() + s.key_end * 16), want);
  // the key residual and the value window stay the fp16 input, bit for bit
  EXPECT_EQ(std::vector<float>(r.k.data.begin() + s.key_end * 16, r.k.data.end()),
            std::vector<float>(k.data.begin() + s.key_end * 16, k.data.end()));
  EXPECT_EQ(std::vector<float>(r.v.data.begin() + s.value_end * 16, r.v.data.end()),
            std::vector<float>(v.data.begin() + s.value_end * 16, v.data.end()));
  // rot_roles=k leaves the values as kivi-2 has them
  const Reconstruction rk = parse_method("kivi:rot=hadamard:9,rot_roles=k")->apply(k.view(), v.view());
  const Reconstruction plain = parse_method("kivi-2")->apply(k.view(), v.view());
  EXPECT_EQ(rk.v.data, plain.v.data);
  EXPECT_EQ(rk.k.data, r.k.data);
  EXPECT_NE(rk.k.data, plain.k.data);
}

TEST(Rotation, SpecsBitsAndErrors) {
  // published specs stay canonical: rot keys print only when set
  EXPECT_EQ(parse_method("kivi-2")->spec(),
            "kivi:kbits=2,vbits=2,group=128,vgroup=all,sink=0,residual=128,params=fp16,profile=kvlab");
  const MethodPtr m = parse_method("kivi:rot=hadamard");
  EXPECT_EQ(m->spec(),
            "kivi:kbits=2,vbits=2,group=128,vgroup=all,sink=0,residual=128,params=fp16,profile=kvlab,rot="
            "hadamard:0");
  EXPECT_TRUE(*parse_method(m->spec()) == *m);
  EXPECT_FALSE(*m == *parse_method("kivi-2"));
  for (const char* text : {"int8:rot=hadamard:3,rot_roles=v", "kitty:rot=hadamard:1,rot_roles=k"}) {
    const MethodPtr x = parse_method(text);
    EXPECT_TRUE(*parse_method(x->spec()) == *x) << text;
  }
  // zero bits: the rotation is a function of the seed in the spec
  EXPECT_DOUBLE_EQ(m->bits(4096, 128).both(), parse_method("kivi-2")->bits(4096, 128).both());
  for (const char* bad :
       {"kivi:rot=walsh", "kivi:rot=hadamard:-1", "kivi:rot=hadamard:x", "kivi:rot_roles=q"})
    EXPECT_THROW(parse_method(bad), std::invalid_argument) << bad;
  // head_dim must be a power of two: at resolve time and in apply
  EXPECT_THROW(m->check_model({1, 1, 96}), std::invalid_argument);
  EXPECT_NO_THROW(m->check_model({1, 1, 128}));
  EXPECT_NO_THROW(parse_method("kivi-2")->check_model({1, 1, 96}));
  const Tensor k = kvtest::random_kv({1, 130, 12}, 1);
  EXPECT_THROW(m->apply(k.view(), k.view()), std::invalid_argument);
}

}  // namespace
