// kvlab's kivi and kitty-sim profiles against the upstream arithmetic as it ran in PyTorch
// on CUDA (fp16). The references were written by scripts/goldens/upstream_profiles.py
// (torch 2.11.0+cu130 on an H200) into tests/data/upstream; 0 mismatching bits allowed.
#include <gtest/gtest.h>

#include <cstring>

#include "kvlab/half.h"
#include "kvlab/npy.h"
#include "kvlab/quantizer.h"

namespace {

std::string file(const std::string& c, const std::string& what) {
  return std::string(KVLAB_TEST_DATA) + "/upstream/" + c + "_" + what + ".npy";
}

std::vector<uint16_t> halves(const kvlab::NpyArray& a) {
  EXPECT_EQ(a.descr, "<f2");
  std::vector<uint16_t> v(a.numel());
  std::memcpy(v.data(), a.bytes.data(), a.bytes.size());
  return v;
}

// Count elements whose fp16 bits differ from the reference.
int64_t half_mismatches(const std::vector<float>& ours, const std::vector<uint16_t>& ref) {
  EXPECT_EQ(ours.size(), ref.size());
  int64_t bad = 0;
  for (size_t i = 0; i < ours.size() && i < ref.size(); ++i) bad += kvlab::float_to_half(ours[i]) != ref[i];
  return bad;
}

void check_case(const std::string& c, const std::string& spec_text) {
  SCOPED_TRACE(c + " with " + spec_text);
  const kvlab::NpyArray x = kvlab::read_npy(file(c, "x"));
  const kvlab::QuantizedTensor q =
      kvlab::quantize(kvlab::as_tensor(x, file(c, "x")), kvlab::parse_quantizer(spec_text));

  const kvlab::NpyArray codes = kvlab::read_npy(file(c, "codes"));
  const std::vector<uint8_t> ours = kvlab::unpack_codes(q);
  ASSERT_EQ(ours.size(), codes.bytes.size());
  int64_t code_bad = 0;
  for (size_t i = 0; i < ours.size(); ++i) code_bad += ours[i] != codes.bytes[i];
  EXPECT_EQ(code_bad, 0) << "codes differ from upstream";

  EXPECT_EQ(half_mismatches(q.scale, halves(kvlab::read_npy(file(c, "scale")))), 0) << "scales";
  EXPECT_EQ(half_mismatches(q.zero, halves(kvlab::read_npy(file(c, "zero")))), 0) << "minima";
  EXPECT_EQ(half_mismatches(kvlab::dequantize(q), halves(kvlab::read_npy(file(c, "dq")))), 0)
      << "dequantized";
  const std::vector<uint16_t> dq_half = kvlab::dequantize_half(q),
                              dq_ref = halves(kvlab::read_npy(file(c, "dq")));
  EXPECT_EQ(dq_half, dq_ref) << "fp16 dequantized output";

  if (q.spec.boosted()) {  // Kitty's promote mask (H, D) against our page index (H, 1 page, D)
    const kvlab::NpyArray mask = kvlab::read_npy(file(c, "mask"));
    ASSERT_EQ(mask.bytes.size(), q.boost_index.size());
    for (size_t i = 0; i < mask.bytes.size(); ++i)
      EXPECT_EQ(mask.bytes[i] != 0, q.boost_index[i] != kvlab::kNotBoosted) << "channel " << i;
  }
}

TEST(UpstreamProfiles, KiviKeysPerChannel) {
  check_case("kivi_k2", "bits=2,axis=channel,group=32,profile=kivi");
  check_case("kivi_k4", "bits=4,axis=channel,group=32,profile=kivi");
}

TEST(UpstreamProfiles, KiviValuesPerToken) {
  check_case("kivi_v2", "bits=2,axis=token,group=16,profile=kivi");
  check_case("kivi_v4", "bits=4,axis=token,group=8,profile=kivi");
}

TEST(UpstreamProfiles, KittySimKeysWithBoost) {
  check_case("kitty_k_boost125", "bits=2,axis=channel,group=128,profile=kitty-sim,boost=0.125");
  check_case("kitty_k_boost250", "bits=2,axis=channel,group=128,profile=kitty-sim,boost=0.25");
}

TEST(UpstreamProfiles, KittySimValues) {
  check_case("kitty_v2", "bits=2,axis=token,group=all,profile=kitty-sim");
}

// The kvlab profile is not the upstream arithmetic: it must differ somewhere on these inputs
// (otherwise the golden comparison above would not be telling the profiles apart).
TEST(UpstreamProfiles, KvlabProfileDiffersFromKivi) {
  const kvlab::NpyArray x = kvlab::read_npy(file("kivi_k2", "x"));
  const auto q = kvlab::quantize(kvlab::as_tensor(x, "x"),
                                 kvlab::parse_quantizer("bits=2,axis=channel,group=32,params=fp16"));
  EXPECT_GT(half_mismatches(kvlab::dequantize(q), halves(kvlab::read_npy(file("kivi_k2", "dq")))), 0);
}

}  // namespace
