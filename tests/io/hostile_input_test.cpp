// The hostile inputs of issue 17 (tests/fuzz/make_regressions.py wrote them): each is refused
// with an error naming the file, before any allocation its claims would cause. And the child
// process that parses HDF5 files: crashes, endless loops and memory hogs become errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <string>

#include "../../io/src/isolate.h"
#include "../core/test_util.h"
#include "kvlab/codebook_file.h"
#include "kvlab/dump.h"
#include "kvlab/llama2c.h"
#include "kvlab/npy.h"

namespace {

using namespace kvlab;
using kvtest::message_of;
using ::testing::AllOf;
using ::testing::HasSubstr;

std::string regression(const std::string& name) {
  return std::string(KVLAB_SOURCE_DIR) + "/tests/fuzz/" + name;
}

std::string open_error(const std::string& path) {
  return message_of<std::runtime_error>([&] { open_dump(path); });
}

TEST(HostileInput, ShapeWhoseElementCountOverflowsIsRefused) {
  const std::string npz = regression("dump/overflow_shape.npz");
  EXPECT_THAT(open_error(npz), AllOf(HasSubstr(npz), HasSubstr("overflows")));
  const std::string npy = regression("npy/overflow_shape.npy");
  EXPECT_THAT(message_of<std::runtime_error>([&] { read_npy(npy); }),
              AllOf(HasSubstr(npy), HasSubstr("overflows")));
}

TEST(HostileInput, EndlessZerosAreNotANpy) {
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_THAT(message_of<std::runtime_error>([] { read_npy("/dev/zero"); }),
              AllOf(HasSubstr("/dev/zero"), HasSubstr("not a .npy file")));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
}

TEST(HostileInput, ZipMemberClaimingFourGigabytes) {
  EXPECT_THAT(message_of<std::runtime_error>([] { read_npz(regression("zip/member_claims_4gb.zip")); }),
              HasSubstr("a stored member of"));
  EXPECT_THAT(
      message_of<std::runtime_error>([] { read_npz(regression("npz/deflated_member_claims_4gb.npz")); }),
      HasSubstr("cannot inflate to 4294967280 bytes"));
}

TEST(HostileInput, PerLayerNameClaimingAHugeLayer) {
  EXPECT_THAT(open_error(regression("dump/layer_999999999.npz")), HasSubstr("layer 0 has no q"));
}

TEST(HostileInput, EmptyZipHasNoArraysAndIsNotTruncated) {
  const std::string e = open_error(regression("dump/empty.zip"));
  EXPECT_THAT(e, HasSubstr("no q/k/v arrays found (it holds: nothing)"));
  EXPECT_THAT(e, ::testing::Not(HasSubstr("truncated")));
}

TEST(HostileInput, StackedMemberCrcIsCheckedOnOpen) {
  EXPECT_THAT(open_error(regression("dump/stacked_bad_crc.npz")), HasSubstr("CRC-32 mismatch"));
}

TEST(HostileInput, Hdf5DatasetDeclaringMoreTokensThanStored) {
  const std::string h5 = regression("dump/huge_tokens.h5");
  EXPECT_THAT(open_error(h5),
              AllOf(HasSubstr(h5), HasSubstr("claims 1600000000000 bytes but the file stores")));
}

TEST(HostileInput, CodebookSpecDisagreeingWithStages) {
  const std::string cb = regression("codebook/spec_disagrees_with_stages.h5");
  EXPECT_THAT(message_of<std::runtime_error>([&] { read_codebook_file(cb); }),
              AllOf(HasSubstr(cb), HasSubstr("spec 'VQ<4,2,2>' disagrees with the attributes")));
}

TEST(HostileInput, StringAttributeClaimingFourGigabytes) {
  const std::string cb = regression("codebook/string_attr_size.h5");
  EXPECT_THAT(message_of<std::runtime_error>([&] { read_codebook_file(cb); }), HasSubstr(cb));
}

TEST(HostileInput, TokenizerShorterThanItsVocabulary) {
  EXPECT_THAT(
      message_of<std::runtime_error>([] { Llama2cTokenizer(regression("tokenizer/short.tok"), 1 << 22); }),
      HasSubstr("truncated"));
}

TEST(Isolated, ReturnsAndRethrows) {
  int ran = 0;
  detail::run_isolated([&] { ran = 1; }, "'x'", 1.0);
  EXPECT_EQ(ran, 0);  // it ran in the child
  EXPECT_EQ(message_of<std::runtime_error>([] {
              detail::run_isolated([] { throw std::runtime_error("'x': the reason"); }, "'x'", 1.0);
            }),
            "'x': the reason");
}

TEST(Isolated, CrashBecomesAnError) {
  EXPECT_THAT(
      message_of<std::runtime_error>([] { detail::run_isolated([] { raise(SIGSEGV); }, "'x'", 1.0); }),
      AllOf(HasSubstr("'x': the parser crashed"), HasSubstr("corrupt")));
}

TEST(Isolated, EndlessLoopEndsWithinItsCpuBudget) {
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_THAT(message_of<std::runtime_error>([] {
                detail::run_isolated(
                    [] {
                      volatile uint64_t spin = 0;
                      while (true) spin = spin + 1;
                    },
                    "'x'", 0.3);
              }),
              HasSubstr("of CPU time"));
  EXPECT_LT(std::chrono::steady_clock::now() - t0,
            std::chrono::seconds(20));  // wall: the machine may be busy
}

#if !defined(__SANITIZE_ADDRESS__)
TEST(Isolated, MemoryBeyondTheLimitBecomesAnError) {
  EXPECT_THAT(message_of<std::runtime_error>(
                  [] { detail::run_isolated([] { std::vector<char> big(1ull << 30, 1); }, "'x'", 5.0); }),
              HasSubstr("more than 64 MiB of memory"));
}
#endif

}  // namespace
