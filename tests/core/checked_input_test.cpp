// User-given numbers and spec strings: sizes that cannot overflow, a bounded thread count, spec
// keys that may not repeat or go negative, whole numbers only.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

#include "kvlab/kv_text.h"
#include "kvlab/method.h"
#include "kvlab/sizes.h"
#include "kvlab/spec.h"
#include "kvlab/threads.h"
#include "test_util.h"

namespace {

using kvtest::message_of;
using ::testing::HasSubstr;
constexpr int64_t kBig = int64_t(1) << 62;

TEST(CheckedInput, ProductsThatOverflowOrGoNegativeAreNamedErrors) {
  EXPECT_EQ(kvlab::checked_product({4096, 128, 16}, "x"), 4096 * 128 * 16);
  EXPECT_EQ(kvlab::checked_product({kBig, 1}, "x"), kBig);
  EXPECT_EQ(kvlab::checked_product({kBig, 0, kBig}, "x"), 0);  // zero first or last: no overflow
  EXPECT_THAT(message_of<std::invalid_argument>([] {
                kvlab::checked_product({kBig, 2}, "--tokens x --head-dim");
              }),
              HasSubstr("--tokens x --head-dim: 4611686018427387904 x 2 overflows a 64-bit size"));
  EXPECT_THAT(message_of<std::invalid_argument>([] {
                kvlab::checked_product({3, -1}, "sizes");
              }),
              HasSubstr("sizes: 3 x -1 has a negative factor"));
  EXPECT_THAT(message_of<std::invalid_argument>([] { kvlab::check_fits_memory(kBig, 4, "one layer"); }),
              HasSubstr("one layer needs"));
  EXPECT_NO_THROW(kvlab::check_fits_memory(1 << 20, 4, "small"));
}

TEST(CheckedInput, ThreadCountsAreBounded) {
  const int max = kvlab::max_threads();
  EXPECT_GE(max, 64);
  EXPECT_LE(max, 1024);
  EXPECT_EQ(kvlab::threads_error(0), "");
  EXPECT_EQ(kvlab::threads_error(max), "");
  EXPECT_THAT(kvlab::threads_error(max + 1), HasSubstr(std::to_string(max + 1) + " is outside 0"));
  EXPECT_THAT(kvlab::threads_error(-1), HasSubstr("-1 is outside"));
  EXPECT_THAT(message_of<std::invalid_argument>([] { kvlab::ScopedThreads s(100000); }),
              HasSubstr("threads: 100000 is outside 0 (the OpenMP default) to"));
  EXPECT_THAT(message_of<std::invalid_argument>([] { kvlab::resolve_threads(-3); }), HasSubstr("-3"));
  EXPECT_EQ(kvlab::resolve_threads(7), 7);
}

// OMP_NUM_THREADS sets OpenMP's default as omp_set_num_threads does; above the bound, the
// default (0) is refused where it would be used.
TEST(CheckedInput, OpenMpDefaultIsBounded) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(kvlab::max_threads() + 1);
  EXPECT_THAT(
      message_of<std::invalid_argument>([] { kvlab::check_default_threads(); }),
      HasSubstr("OMP_NUM_THREADS: " + std::to_string(kvlab::max_threads() + 1) + " threads is more than"));
  EXPECT_THAT(message_of<std::invalid_argument>([] { kvlab::ScopedThreads s(0); }),
              HasSubstr("OMP_NUM_THREADS"));
  EXPECT_THAT(message_of<std::invalid_argument>([] { kvlab::resolve_threads(0); }),
              HasSubstr("OMP_NUM_THREADS"));
  EXPECT_EQ(kvlab::resolve_threads(3), 3);  // an explicit count does not use the default
  omp_set_num_threads(kvlab::max_threads());
  EXPECT_NO_THROW(kvlab::check_default_threads());
  omp_set_num_threads(saved);
}

TEST(CheckedInput, RepeatedSpecKeysAreErrorsNamingTheKey) {
  EXPECT_THAT(
      message_of<std::invalid_argument>([] { kvlab::text::split_pairs("bits=2,bits=4", "quantizer spec"); }),
      HasSubstr("quantizer spec 'bits=2,bits=4': key 'bits' is given twice"));
  EXPECT_THAT(message_of<std::invalid_argument>([] { kvlab::parse_quantizer("bits=2,axis=token,bits=4"); }),
              HasSubstr("key 'bits' is given twice"));
  EXPECT_THAT(message_of<std::invalid_argument>([] { kvlab::parse_method("kivi:kbits=2,kbits=4"); }),
              HasSubstr("key 'kbits' is given twice"));
  EXPECT_EQ(kvlab::text::split_pairs("a=1,b=2", "x").size(), 2u);
}

TEST(CheckedInput, NegativeGroupsAreErrorsNotAll) {
  EXPECT_EQ(kvlab::parse_group_size("all", "group"), kvlab::kWholeAxis);
  EXPECT_EQ(kvlab::parse_group_size("128", "group"), 128);
  for (const char* v : {"-1", "0", "-128"})
    EXPECT_THAT(message_of<std::invalid_argument>([&] { kvlab::parse_group_size(v, "group"); }),
                HasSubstr(std::string("group=") + v + " must be >= 1 (or 'all'"));
  EXPECT_THAT(message_of<std::invalid_argument>([] { kvlab::parse_quantizer("bits=2,group=-1"); }),
              HasSubstr("group=-1 must be >= 1"));
  EXPECT_THAT(message_of<std::invalid_argument>([] { kvlab::parse_method("kivi:group=-1"); }),
              HasSubstr("group=-1 must be >= 1"));
  EXPECT_THAT(message_of<std::invalid_argument>([] { kvlab::parse_method("kivi:vgroup=-1"); }),
              HasSubstr("vgroup=-1 must be >= 1"));
  EXPECT_EQ(kvlab::parse_method("kivi:group=all")->uniform()->group, kvlab::kWholeAxis);
}

TEST(CheckedInput, CountsAreWholeNonNegativeNumbers) {
  EXPECT_EQ(kvlab::text::parse_count("0", "tokens"), 0);
  EXPECT_EQ(kvlab::text::parse_count("9223372036854775807", "tokens"), std::numeric_limits<int64_t>::max());
  EXPECT_THAT(message_of<std::invalid_argument>([] { kvlab::text::parse_count("-5", "tokens"); }),
              HasSubstr("tokens='-5' is negative"));
  EXPECT_THAT(
      message_of<std::invalid_argument>([] { kvlab::text::parse_count("9223372036854775808", "seed"); }),
      HasSubstr("seed='9223372036854775808' is too large"));
  for (const char* v : {"", "2abc", "1,2", " 3", "0x10", "1e3"})
    EXPECT_THAT(message_of<std::invalid_argument>([&] { kvlab::text::parse_count(v, "layers"); }),
                HasSubstr("is not a non-negative integer"))
        << v;
}

}  // namespace
