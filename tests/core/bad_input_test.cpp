// Bad input: each is rejected with std::invalid_argument (std::runtime_error for files) whose
// message names the problem.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <vector>

#include "kvlab/method.h"
#include "kvlab/npy.h"
#include "kvlab/quantizer.h"
#include "test_util.h"

namespace {

using namespace kvlab;
using kvtest::message_of;
using ::testing::HasSubstr;

QuantizerSpec asym(int bits, Axis axis, int group) {
  QuantizerSpec s;
  s.bits = bits;
  s.axis = axis;
  s.group = group;
  return s;
}

const Tensor kX = kvtest::random_kv({16, 4}, 1);

TEST(BadInput, GroupZero) {
  const std::string msg =
      message_of<std::invalid_argument>([] { quantize(kX.view(), asym(2, Axis::Channel, 0)); });
  EXPECT_THAT(msg, HasSubstr("group=0"));
  EXPECT_THAT(msg, HasSubstr(">= 1"));
}

TEST(BadInput, GroupLargerThanItsAxis) {
  // (16, 4): axis=channel groups along the 16 tokens, axis=token along the 4 channels
  std::string msg =
      message_of<std::invalid_argument>([] { quantize(kX.view(), asym(2, Axis::Channel, 17)); });
  EXPECT_THAT(msg, HasSubstr("group=17"));
  EXPECT_THAT(msg, HasSubstr("larger than"));
  EXPECT_THAT(msg, HasSubstr("(16)"));
  msg = message_of<std::invalid_argument>([] { quantize(kX.view(), asym(2, Axis::Token, 5)); });
  EXPECT_THAT(msg, HasSubstr("group=5"));
  EXPECT_THAT(msg, HasSubstr("(4)"));
  // group = the axis length is fine
  EXPECT_NO_THROW(quantize(kX.view(), asym(2, Axis::Token, 4)));
}

TEST(BadInput, BitsZero) {
  const std::string msg =
      message_of<std::invalid_argument>([] { quantize(kX.view(), asym(0, Axis::Channel, 8)); });
  EXPECT_THAT(msg, HasSubstr("bits=0"));
  EXPECT_THAT(msg, HasSubstr("1..8"));
}

TEST(BadInput, BitsNine) {
  const std::string msg =
      message_of<std::invalid_argument>([] { quantize(kX.view(), asym(9, Axis::Channel, 8)); });
  EXPECT_THAT(msg, HasSubstr("bits=9"));
  EXPECT_THAT(msg, HasSubstr("1..8"));
}

TEST(BadInput, SymOneBit) {
  QuantizerSpec s = asym(1, Axis::Channel, 8);
  s.scheme = Scheme::Sym;
  const std::string msg = message_of<std::invalid_argument>([&] { quantize(kX.view(), s); });
  EXPECT_THAT(msg, HasSubstr("sym"));
  EXPECT_THAT(msg, HasSubstr("bits >= 2"));
}

TEST(BadInput, NaNInInput) {
  Tensor x = kX;
  x.data[37] = NAN;
  const std::string msg =
      message_of<std::invalid_argument>([&] { quantize(x.view(), asym(2, Axis::Channel, 8)); });
  EXPECT_THAT(msg, HasSubstr("non-finite"));
  EXPECT_THAT(msg, HasSubstr("nan"));
  EXPECT_THAT(msg, HasSubstr("flat index 37"));
}

TEST(BadInput, InfInInput) {
  Tensor x = kX;
  x.data[5] = -INFINITY;
  const std::string msg =
      message_of<std::invalid_argument>([&] { quantize(x.view(), asym(2, Axis::Token, 4)); });
  EXPECT_THAT(msg, HasSubstr("non-finite"));
  EXPECT_THAT(msg, HasSubstr("inf"));
  EXPECT_THAT(msg, HasSubstr("flat index 5"));
}

TEST(BadInput, InfInFp16Input) {
  std::vector<uint16_t> b(16 * 4, 0x3c00);
  b[9] = 0x7c00;  // +inf
  const std::string msg = message_of<std::invalid_argument>([&] {
    quantize(kvtest::half_view(b, {16, 4}), asym(2, Axis::Channel, 8));
  });
  EXPECT_THAT(msg, HasSubstr("inf"));
  EXPECT_THAT(msg, HasSubstr("flat index 9"));
}

TEST(BadInput, EmptyTensor) {
  const std::vector<float> none;
  const TensorView x{none.data(), DType::F32, {0, 8}};
  const std::string msg = message_of<std::invalid_argument>([&] { quantize(x, asym(2, Axis::Token, 8)); });
  EXPECT_THAT(msg, HasSubstr("empty"));
  EXPECT_THAT(msg, HasSubstr("(0, 8)"));
}

TEST(BadInput, OneDimensionalTensor) {
  const std::vector<float> v(8, 1.0f);
  const TensorView x{v.data(), DType::F32, {8}};
  const std::string msg = message_of<std::invalid_argument>([&] { quantize(x, asym(2, Axis::Token, 8)); });
  EXPECT_THAT(msg, HasSubstr("(8,)"));
  EXPECT_THAT(msg, HasSubstr("2 dims"));
}

TEST(BadInput, NpyOfUnsupportedDtype) {
  kvtest::TempDir dir;
  const std::string path = dir.file("f8.npy");
  NpyArray a;
  a.descr = "<f8";
  a.shape = {2, 3};
  a.bytes.assign(6 * 8, 0);
  write_npy(path, a);
  const NpyArray back = read_npy(path);  // reading any fixed-size dtype is fine ...
  EXPECT_EQ(back.descr, "<f8");
  const std::string msg =
      message_of<std::runtime_error>([&] { as_tensor(back, path); });  // ... viewing it is not
  EXPECT_THAT(msg, HasSubstr("<f8"));
  EXPECT_THAT(msg, HasSubstr(path));
}

TEST(BadInput, TruncatedNpy) {
  kvtest::TempDir dir;
  const std::string path = dir.file("cut.npy");
  write_npy(path, make_npy(std::vector<float>(12, 1.5f), {3, 4}));
  const auto size = std::filesystem::file_size(path);
  std::filesystem::resize_file(path, size - 5);  // 48 data bytes -> 43
  const std::string msg = message_of<std::runtime_error>([&] { read_npy(path); });
  EXPECT_THAT(msg, HasSubstr(path));
  EXPECT_THAT(msg, HasSubstr("truncated"));
  EXPECT_THAT(msg, HasSubstr("48"));  // needs 48 bytes
}

TEST(BadInput, TruncatedNpyHeader) {
  kvtest::TempDir dir;
  const std::string path = dir.file("cut_header.npy");
  write_npy(path, make_npy(std::vector<float>(12, 1.5f), {3, 4}));
  std::filesystem::resize_file(path, 40);  // inside the 64-byte header
  const std::string msg = message_of<std::runtime_error>([&] { read_npy(path); });
  EXPECT_THAT(msg, HasSubstr(path));
  EXPECT_THAT(msg, HasSubstr("truncated"));
}

TEST(BadInput, MissingNpy) {
  kvtest::TempDir dir;
  const std::string path = dir.file("absent.npy");
  const std::string msg = message_of<std::runtime_error>([&] { read_npy(path); });
  EXPECT_THAT(msg, HasSubstr(path));
}

TEST(BadInput, UnknownQuantizerKey) {
  const std::string msg = message_of<std::invalid_argument>([] { parse_quantizer("bits=2,colour=red"); });
  EXPECT_THAT(msg, HasSubstr("colour"));
  EXPECT_THAT(msg, HasSubstr("scheme"));  // lists the valid keys
  EXPECT_THAT(msg, HasSubstr("boost"));
}

TEST(BadInput, UnknownQuantizerValue) {
  const std::string msg = message_of<std::invalid_argument>([] { parse_quantizer("axis=head"); });
  EXPECT_THAT(msg, HasSubstr("axis='head'"));
  EXPECT_THAT(msg, HasSubstr("channel, token"));
}

TEST(BadInput, MalformedQuantizerSpec) {
  EXPECT_THAT(message_of<std::invalid_argument>([] { parse_quantizer("bits"); }), HasSubstr("key=value"));
  EXPECT_THAT(message_of<std::invalid_argument>([] { parse_quantizer("bits=two"); }),
              HasSubstr("not an integer"));
}

TEST(BadInput, UnknownMethodName) {
  const std::string msg = message_of<std::invalid_argument>([] { parse_method("kivi-3"); });
  EXPECT_THAT(msg, HasSubstr("kivi-3"));
  for (const Preset& p : presets()) EXPECT_THAT(msg, HasSubstr(p.name));  // lists every preset
}

TEST(BadInput, UnknownMethodKey) {
  const std::string msg = message_of<std::invalid_argument>([] { parse_method("kivi:kbits=2,boost=0.5"); });
  EXPECT_THAT(msg, HasSubstr("boost"));
  EXPECT_THAT(msg, HasSubstr("residual"));  // lists kivi's keys
}

TEST(BadInput, BoostOnTokenAxis) {
  QuantizerSpec s = asym(2, Axis::Token, 4);
  s.boost = 0.25;
  const std::string msg = message_of<std::invalid_argument>([&] { quantize(kX.view(), s); });
  EXPECT_THAT(msg, HasSubstr("boost"));
  EXPECT_THAT(msg, HasSubstr("axis=channel"));
  EXPECT_THAT(message_of<std::invalid_argument>([] { parse_quantizer("axis=token,group=4,boost=0.25"); }),
              HasSubstr("axis=channel"));
}

TEST(BadInput, BoostWithoutGroup) {
  QuantizerSpec s = asym(2, Axis::Channel, kWholeAxis);
  s.boost = 0.25;
  EXPECT_THAT(message_of<std::invalid_argument>([&] { validate(s); }), HasSubstr("group=G"));
}

TEST(BadInput, BoostAboveSixBits) {
  QuantizerSpec s = asym(7, Axis::Channel, 8);
  s.boost = 0.25;
  EXPECT_THAT(message_of<std::invalid_argument>([&] { validate(s); }), HasSubstr("bits must be <= 6"));
}

TEST(BadInput, BoostOutsideZeroOne) {
  EXPECT_THAT(message_of<std::invalid_argument>([] { parse_quantizer("group=8,boost=1.5"); }),
              HasSubstr("boost=1.5"));
  EXPECT_THAT(message_of<std::invalid_argument>([] { parse_quantizer("group=8,boost=-0.5"); }),
              HasSubstr("boost=-0.5"));
}

TEST(BadInput, KiviProfileWithSymScheme) {
  const std::string msg =
      message_of<std::invalid_argument>([] { parse_quantizer("profile=kivi,scheme=sym"); });
  EXPECT_THAT(msg, HasSubstr("profile=kivi"));
  EXPECT_THAT(msg, HasSubstr("asymmetric only"));
}

TEST(BadInput, UpstreamProfileWithFp32Params) {
  const std::string msg =
      message_of<std::invalid_argument>([] { parse_quantizer("profile=kitty-sim,params=fp32"); });
  EXPECT_THAT(msg, HasSubstr("params=fp32"));
}

TEST(BadInput, ScaleOverflowsFp32) {
  // max - min = 6e38 is beyond FLT_MAX: the fp32 scale would be inf
  const Tensor x = kvtest::make_tensor({2, 1}, {-3e38f, 3e38f});
  const std::string msg =
      message_of<std::invalid_argument>([&] { quantize(x.view(), asym(8, Axis::Channel, 2)); });
  EXPECT_THAT(msg, HasSubstr("overflows fp32"));
  EXPECT_THAT(msg, HasSubstr("group 0 of row 0"));
}

TEST(BadInput, ZeroOverflowsFp16) {
  // fp16 params: the zero fp16(-70000) is -inf, even though the scale (20000 / 3) fits
  const Tensor x = kvtest::make_tensor({2, 1}, {-70000.0f, -50000.0f});
  QuantizerSpec s = asym(2, Axis::Channel, 2);
  s.params = ParamType::F16;
  EXPECT_THAT(message_of<std::invalid_argument>([&] { quantize(x.view(), s); }), HasSubstr("overflows fp16"));
}

TEST(BadInput, SymScaleOverflowsFp16) {
  // sym, 2 bits: scale = absmax / 1 = 70000 > 65504
  const Tensor x = kvtest::make_tensor({2, 1}, {1.0f, 70000.0f});
  QuantizerSpec s = asym(2, Axis::Channel, 2);
  s.scheme = Scheme::Sym;
  s.params = ParamType::F16;
  EXPECT_THAT(message_of<std::invalid_argument>([&] { quantize(x.view(), s); }), HasSubstr("overflows fp16"));
}

TEST(BadInput, UpstreamProfileInputBeyondFp16) {
  // kivi rounds the input to fp16 first: 1e5 becomes inf
  const Tensor x = kvtest::make_tensor({2, 1}, {0.0f, 1e5f});
  QuantizerSpec s = asym(2, Axis::Channel, 2);
  s.profile = Profile::Kivi;
  s.params = ParamType::F16;
  EXPECT_THAT(message_of<std::invalid_argument>([&] { quantize(x.view(), s); }), HasSubstr("overflows fp16"));
}

TEST(BadInput, BoostMoreThan254Channels) {
  // D = 300, ratio 0.9: k = 270 slots, more than a uint8 index (0xFF = not boosted) can name
  const Tensor x = kvtest::random_kv({8, 300}, 3);
  QuantizerSpec s = asym(2, Axis::Channel, 8);
  s.boost = 0.9;
  EXPECT_THAT(message_of<std::invalid_argument>([&] { quantize(x.view(), s); }), HasSubstr("254"));
}

TEST(BadInput, ApplyMethodShapesDiffer) {
  const Tensor k = kvtest::random_kv({8, 4}, 1), v = kvtest::random_kv({8, 5}, 2);
  const std::string msg =
      message_of<std::invalid_argument>([&] { apply_method(parse_method("kivi-2"), k.view(), v.view()); });
  EXPECT_THAT(msg, HasSubstr("(8, 4)"));
  EXPECT_THAT(msg, HasSubstr("(8, 5)"));
}

}  // namespace
