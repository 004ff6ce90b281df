// make_layout: the geometry and the bit count of one packed tensor, checked by hand on a plain
// and a Kitty shape, and its shape checks named as the CPU and GPU report them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kvlab/quantizer.h"

namespace {

using namespace kvlab;
using ::testing::HasSubstr;

TEST(Layout, PlainPerChannelByHand) {
  // 2 slices x 37 tokens x 10 channels, 3-bit codes in groups of 8 tokens, fp16 params.
  const PackedLayout lo =
      make_layout({2, 37, 10}, parse_quantizer("bits=3,axis=channel,group=8,params=fp16"));
  EXPECT_EQ(lo.N, 2);
  EXPECT_EQ(lo.rows(), 10);
  EXPECT_EQ(lo.groups, 5);      // ceil(37 / 8)
  EXPECT_EQ(lo.row_bytes, 14);  // ceil(37 * 3 / 8)
  EXPECT_EQ(lo.codes_bytes(), 2 * 10 * 14);
  EXPECT_EQ(lo.n_params(), 2 * 10 * 5);
  // codes 3 bits x 740 elements, scale and zero 16 bits x 100 groups each
  EXPECT_EQ(lo.payload_bits(), 740.0 * 3 + 100 * 16 * 2);
}

TEST(Layout, KittyPagesByHand) {
  // 1 slice x 300 tokens x 16 channels, pages of 128 (last 44), 2 of 16 channels boosted.
  const PackedLayout lo = make_layout({1, 300, 16}, parse_quantizer("bits=2,group=128,boost=0.125"));
  EXPECT_EQ(lo.groups, 3);
  EXPECT_EQ(lo.last(), 44);
  EXPECT_EQ(lo.k, 2);
  EXPECT_EQ(lo.slice_low(), 2 * 16 * 32 + 16 * 11);  // 2 bits x 128 tokens = 32 bytes per channel row
  EXPECT_EQ(lo.slice_high(), 2 * 2 * 32 + 2 * 11);
  EXPECT_EQ(lo.index_bytes(), 3 * 16);
  // low codes, 2 high bits of 2 channels x 300 tokens, index bytes, fp32 scale + zero per (page, channel)
  EXPECT_EQ(lo.payload_bits(), 4800.0 * 2 + 2 * 300 * 2 + 48 * 8 + 48 * 32 * 2);
}

TEST(Layout, ShapeChecksNameTheShape) {
  const QuantizerSpec s = parse_quantizer("bits=2,axis=token,group=64");
  try {
    make_layout({4, 32}, s);
    FAIL() << "group 64 > 32 channels was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("group=64 is larger than the channel axis it groups (32)"));
    EXPECT_THAT(e.what(), HasSubstr("(4, 32)"));
  }
  EXPECT_THROW(make_layout({32}, s), std::invalid_argument);
  EXPECT_THROW(make_layout({0, 64}, s), std::invalid_argument);
}

}  // namespace
