// check-attention's library: an fp32 kernel passes its bound, one wrong value fails by name,
// and malformed cases and types are refused naming what is wrong.
#include "kvlab/decode_check.h"

#include <gtest/gtest.h>

#include <cmath>

namespace kvlab {
namespace {

// Plain fp32 decode attention over the case's K_hat / V_hat (what a correct kernel computes).
std::vector<float> fp32_attention(const DecodeCase& c) {
  std::vector<float> out(c.q.size());
  const int group = c.Hq / c.Hkv, D = c.D;
  for (int b = 0; b < c.batch(); ++b) {
    const int L = c.lengths[b];
    const std::vector<float> k = decode_case_hat(c, b, true), v = decode_case_hat(c, b, false);
    for (int h = 0; h < c.Hq; ++h) {
      const float* q = &c.q[((size_t)b * c.Hq + h) * D];
      const size_t kv = (size_t)(h / group) * L * D;
      std::vector<float> s(L);
      float mx = -INFINITY, sum = 0.0f;
      for (int t = 0; t < L; ++t) {
        float a = 0.0f;
        for (int ch = 0; ch < D; ++ch) a += q[ch] * k[kv + (size_t)t * D + ch];
        s[t] = a / std::sqrt((float)D);
        mx = std::max(mx, s[t]);
      }
      for (float& x : s) sum += x = std::exp(x - mx);
      for (int ch = 0; ch < D; ++ch) {
        float o = 0.0f;
        for (int t = 0; t < L; ++t) o += s[t] * v[kv + (size_t)t * D + ch];
        out[((size_t)b * c.Hq + h) * D + ch] = o / sum;
      }
    }
  }
  return out;
}

TEST(DecodeCheck, Fp32KernelPassesAndAWrongValueFailsByName) {
  for (const char* name : {"kivi-2", "kivi-4-sink", "int8", "kitty", "fp16"}) {
    const MethodPtr m =
        parse_method(std::string(name) == "kivi-4-sink" ? "kivi:kbits=4,vbits=4,sink=8" : name);
    const DecodeCase c = make_decode_case(*m, {1, 200, 333}, 8, 2, 64, 3);
    std::vector<float> out = fp32_attention(c);
    KernelArithmetic fp32;
    fp32.operand_u = unit_roundoff("fp32");
    const DecodeCheckResult good = check_decode_output(c, out, fp32);
    ASSERT_EQ(good.rows.size(), 24u);
    EXPECT_TRUE(good.ok()) << name;
    out[((size_t)2 * 8 + 6) * 64 + 9] += 0.05f;
    const DecodeCheckResult bad = check_decode_output(c, out, fp32);
    EXPECT_FALSE(bad.ok()) << name;
    for (const DecodeCheckRow& r : bad.rows) {
      EXPECT_EQ(r.ok, !(r.seq == 2 && r.head == 6)) << name << " " << r.seq << " " << r.head;
      if (!r.ok) EXPECT_EQ(r.worst_channel, 9);
    }
  }
}

TEST(DecodeCheck, RefusesBadCasesAndTypes) {
  EXPECT_THROW(unit_roundoff("fp8"), std::invalid_argument);
  const MethodPtr m = parse_method("kivi-2");
  EXPECT_THROW(make_decode_case(*m, {100}, 6, 4, 64, 1), std::invalid_argument);  // 6 heads on 4
  DecodeCase c = make_decode_case(*m, {300}, 4, 2, 64, 1);
  c.k[0].fp16.pop_back();
  try {
    check_decode_case(c);
    FAIL() << "a short fp16 part was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("sequence 0 keys"), std::string::npos) << e.what();
  }
  EXPECT_THROW(check_decode_output(make_decode_case(*m, {300}, 4, 2, 64, 1), std::vector<float>(5), {}),
               std::invalid_argument);
}

}  // namespace
}  // namespace kvlab
