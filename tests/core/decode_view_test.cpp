// decode_view.h: each core family's streaming rule (decode_check.h: every step against its own
// prefix, bit for bit); the hand-checked G=4, R=4, S=1 case; the refused methods. kvquant's and
// plan's rules are tested in tests/vq/kvquant_test.cpp and tests/calibration/plan_test.cpp.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "decode_check.h"
#include "kvlab/decode_view.h"
#include "kvlab/method.h"
#include "test_util.h"

namespace {

using namespace kvlab;

using kvtest::marks;
using kvtest::same_bits;

// The rule holds for `spec` on random (1, T, D) data: every step, both roles, bit for bit.
void check_streaming(const std::string& spec, int64_t T, int64_t D) {
  SCOPED_TRACE(spec);
  const Tensor k = kvtest::random_kv({1, T, D}, 11), v = kvtest::random_kv({1, T, D}, 12);
  kvtest::check_streaming(*parse_method(spec), k, v);
}

TEST(DecodeView, EveryStreamingFamilyMatchesItsPrefix) {
  for (const char* spec :
       {"kivi:group=8,residual=4,sink=0", "kivi:group=8,residual=5,sink=3,kbits=4,vbits=4",
        "kivi:group=8,residual=4,sink=2,vgroup=16,profile=kivi", "kivi:group=8,residual=4,params=fp32",
        "kivi:group=8,residual=4,sink=1,rot=hadamard:3",
        "kivi:group=8,residual=4,sink=1,rot=hadamard,rot_roles=k", "kitty:group=8,residual=4,sink=2",
        "kitty:group=8,residual=4,sink=2,boost=0.25,profile=kitty-sim",
        "kitty:group=8,residual=4,sink=1,rot=hadamard:1", "int8:group=8", "int8:group=8,rot=hadamard:2",
        "fp8:calib=max,calib_tokens=5", "fp8:calib=percentile:99,calib_tokens=9,scale=channel", "fp4:fmt=mx"})
    check_streaming(spec, 29, 32);
}

TEST(DecodeView, Fp16NeverQuantizes) {
  const MethodPtr m = parse_method("fp16");
  for (int64_t n : {1, 5, 1000}) {
    const Schedule s = m->decode_schedule(n);
    EXPECT_EQ(s.key_end - s.key_begin + s.value_end - s.value_begin, 0);
  }
}

// Hand-checked: kivi G=4, R=4, S=1. Keys: token 0 stays fp16 (sink), a group of 4 is quantized
// at the step it fills (tokens 1-4 at t=4, 5-8 at t=8); values: quantized once they leave the
// newest 4 (token 1 at t=5).
TEST(DecodeView, HandCheckedKiviG4R4S1) {
  const MethodPtr m = parse_method("kivi:group=4,residual=4,sink=1");
  const std::vector<std::string> keys = {
      "f",        "ff",        "fff",        "ffff",        "fqqqq",        "fqqqqf",       "fqqqqff",
      "fqqqqfff", "fqqqqqqqq", "fqqqqqqqqf", "fqqqqqqqqff", "fqqqqqqqqfff", "fqqqqqqqqqqqq"};
  const std::vector<std::string> values = {
      "f",        "ff",        "fff",        "ffff",        "fffff",        "fqffff",       "fqqffff",
      "fqqqffff", "fqqqqffff", "fqqqqqffff", "fqqqqqqffff", "fqqqqqqqffff", "fqqqqqqqqffff"};
  for (int64_t t = 0; t <= 12; ++t) {
    const Schedule s = m->decode_schedule(t + 1);
    EXPECT_EQ(marks(s.key_begin, s.key_end, t), keys[t]) << "keys at step " << t;
    EXPECT_EQ(marks(s.value_begin, s.value_end, t), values[t]) << "values at step " << t;
  }
  // int8 with groups of 4: both roles quantized when a group fills; fp8 calibrated on 3 tokens:
  // everything quantized from the 4th token on.
  const MethodPtr i8 = parse_method("int8:group=4"), f8 = parse_method("fp8:calib=max,calib_tokens=3");
  const std::vector<std::string> i8_marks = {"f",     "ff",     "fff",     "qqqq",
                                             "qqqqf", "qqqqff", "qqqqfff", "qqqqqqqq"};
  for (int64_t t = 0; t < (int64_t)i8_marks.size(); ++t) {
    const Schedule s = i8->decode_schedule(t + 1);
    EXPECT_EQ(marks(s.key_begin, s.key_end, t), i8_marks[t]) << "int8 keys at step " << t;
    EXPECT_EQ(marks(s.value_begin, s.value_end, t), i8_marks[t]) << "int8 values at step " << t;
    const Schedule f = f8->decode_schedule(t + 1);
    EXPECT_EQ(marks(f.key_begin, f.key_end, t), std::string(t + 1, t >= 3 ? 'q' : 'f'))
        << "fp8 at step " << t;
  }
}

// Methods whose scales span tokens that do not exist yet are refused, naming the reason, and
// the refusal is real: apply() on a prefix gives other bytes than on the whole sequence.
TEST(DecodeView, NonCausalMethodsAreRefused) {
  const std::vector<std::pair<std::string, std::string>> cases = {{"int8", "group=all"},
                                                                  {"kivi:group=all", "group=all"},
                                                                  {"fp8-e4m3", "dynamic scales"},
                                                                  {"fp8:calib=max", "calib_tokens=half"},
                                                                  {"nvfp4", "tensor scale"}};
  for (const auto& [spec, why] : cases) {
    SCOPED_TRACE(spec);
    const MethodPtr m = parse_method(spec);
    try {
      check_decodable(*m);
      ADD_FAILURE() << "accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(m->spec()), std::string::npos) << e.what();
    }
  }
  const Tensor k = kvtest::random_kv({1, 40, 16}, 3);
  const MethodPtr int8 = parse_method("int8");
  const Tensor k20{{1, 20, 16}, std::vector<float>(k.data.begin(), k.data.begin() + 20 * 16)};
  const Reconstruction whole = int8->apply(k.view(), k.view()), part = int8->apply(k20.view(), k20.view());
  EXPECT_FALSE(same_bits(whole.k.data.data(), part.k.data.data(), 20 * 16));
}

TEST(DecodeView, BadStep) {
  const Tensor k = kvtest::random_kv({1, 4, 8}, 1);
  EXPECT_THROW(decode_view(*parse_method("kivi-2"), k.view(), k.view(), 4), std::invalid_argument);
  EXPECT_THROW(decode_view(*parse_method("kivi-2"), k.view(), k.view(), -1), std::invalid_argument);
}

}  // namespace
