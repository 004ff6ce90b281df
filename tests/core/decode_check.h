// The decode-rule check every family's test shares (docs/FORMATS.md section 12): for every step
// t, the view rebuilt from the prefix alone (decode_view) equals the one-pass bytes
// (decode_final) on decode_schedule(t + 1) and the fp16 input elsewhere, bit for bit, for keys
// and values; the ranges only grow; and the last step holds quantized keys that differ from fp16.
#pragma once
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "kvlab/decode_view.h"
#include "kvlab/half.h"
#include "kvlab/method.h"

namespace kvtest {

// 'q' for each token 0..t the ranges [begin, end) hold quantized, 'f' for fp16.
inline std::string marks(int64_t begin, int64_t end, int64_t t) {
  std::string s;
  for (int64_t j = 0; j <= t; ++j) s += kvlab::in_range(j, begin, end) ? 'q' : 'f';
  return s;
}

inline bool same_bits(const float* a, const float* b, int64_t n) {
  return std::memcmp(a, b, n * sizeof(float)) == 0;
}

// k, v: (1, T, D). `at` names the layer and KV head (a plan: that layer's or head's rule) and, for methods
// that quantize keys before RoPE, holds the pre-RoPE keys (1, T, D).
inline void check_streaming(const kvlab::Method& whole, const kvlab::Tensor& k, const kvlab::Tensor& v,
                            const kvlab::HeadContext& at = {}) {
  using namespace kvlab;
  const Method& m = head_method(whole, at.layer, at.kv_head);
  const int64_t T = k.shape[1], D = k.shape[2];
  const Reconstruction fin = decode_final(whole, k.view(), v.view(), at);
  Schedule prev{};
  int64_t quantized_rows_differing = 0;
  for (int64_t t = 0; t < T; ++t) {
    SCOPED_TRACE("step " + std::to_string(t));
    const Schedule s = m.decode_schedule(t + 1);
    // ranges only grow: what was quantized stays quantized
    if (prev.key_end > prev.key_begin) {
      EXPECT_TRUE(s.key_begin <= prev.key_begin && s.key_end >= prev.key_end);
    }
    if (prev.value_end > prev.value_begin) {
      EXPECT_TRUE(s.value_begin <= prev.value_begin && s.value_end >= prev.value_end);
    }
    prev = s;
    const Reconstruction view = decode_view(whole, k.view(), v.view(), t, at);
    ASSERT_EQ(view.k.shape, (std::vector<int64_t>{1, t + 1, D}));
    for (int64_t j = 0; j <= t; ++j) {
      const bool qk = in_range(j, s.key_begin, s.key_end), qv = in_range(j, s.value_begin, s.value_end);
      std::vector<float> k16(D), v16(D);
      for (int64_t c = 0; c < D; ++c) {
        k16[c] = round_to_half(k.data[j * D + c]);
        v16[c] = round_to_half(v.data[j * D + c]);
      }
      const float* ek = qk ? &fin.k.data[j * D] : k16.data();
      const float* ev = qv ? &fin.v.data[j * D] : v16.data();
      ASSERT_TRUE(same_bits(&view.k.data[j * D], ek, D)) << "key token " << j;
      ASSERT_TRUE(same_bits(&view.v.data[j * D], ev, D)) << "value token " << j;
      if (qk && t == T - 1) quantized_rows_differing += !same_bits(ek, k16.data(), D);
    }
  }
  // not vacuous: the last step holds quantized keys that differ from fp16
  EXPECT_GT(quantized_rows_differing, 0);
}

}  // namespace kvtest
