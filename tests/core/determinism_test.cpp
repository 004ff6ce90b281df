// The same bytes whatever the OpenMP thread count: quantize (and dequantize) with 1, 2 and 3
// threads and compare every output array.
#include <gtest/gtest.h>

#include <vector>

#include "kvlab/quantizer.h"
#include "kvlab/threads.h"
#include "test_util.h"

namespace {

using namespace kvlab;

struct Outputs {
  QuantizedTensor q;
  std::vector<uint8_t> codes;
  std::vector<float> deq;
};

Outputs run_with(int threads, const TensorView& x, const QuantizerSpec& spec) {
  const ScopedThreads scope(threads);
  Outputs r{quantize(x, spec), {}, {}};
  r.codes = unpack_codes(r.q);
  r.deq = dequantize(r.q);
  return r;
}

TEST(Determinism, OneTwoAndThreeThreadsGiveIdenticalBytes) {
  // slices x groups exercise: parallel groups (G*bits a multiple of 8), one thread per slice
  // (groups sharing bytes), 128-token chunks of whole-axis groups, token rows, sym, boost pages.
  const char* specs[] = {
      "bits=2,axis=channel,group=16",
      "bits=3,axis=channel,group=3",
      "bits=5,axis=channel,group=all,params=fp16",
      "bits=4,axis=token,group=7",
      "scheme=sym,bits=8,axis=channel,group=all",
      "scheme=sym,bits=3,axis=token,group=all,params=fp16",
      "bits=2,axis=channel,group=32,profile=kivi",
      "bits=2,axis=token,group=all,profile=kivi",
      "bits=2,axis=channel,group=64,boost=0.25",
      "bits=3,axis=channel,group=100,boost=0.125,profile=kitty-sim",
  };
  const Tensor x = kvtest::random_kv({4, 300, 24}, 99);
  const Tensor xh = kvtest::rounded_to_half(x);
  const std::vector<uint16_t> hb = kvtest::half_bits_of(xh);
  for (const char* text : specs)
    for (bool half_input : {false, true}) {
      SCOPED_TRACE(::testing::Message() << text << (half_input ? " fp16 input" : " fp32 input"));
      const QuantizerSpec spec = parse_quantizer(text);
      const TensorView v = half_input ? kvtest::half_view(hb, x.shape) : x.view();
      const Outputs one = run_with(1, v, spec);
      for (int threads : {2, 3}) {
        const Outputs many = run_with(threads, v, spec);
        EXPECT_EQ(many.q.codes, one.q.codes) << threads << " threads";
        EXPECT_EQ(many.q.scale, one.q.scale) << threads << " threads";
        EXPECT_EQ(many.q.zero, one.q.zero) << threads << " threads";
        EXPECT_EQ(many.q.high, one.q.high) << threads << " threads";
        EXPECT_EQ(many.q.boost_index, one.q.boost_index) << threads << " threads";
        EXPECT_EQ(many.codes, one.codes) << threads << " threads";
        EXPECT_EQ(many.deq, one.deq) << threads << " threads";
      }
    }
}

}  // namespace
