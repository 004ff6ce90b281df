// torch.save files read as dumps (open_dump on .pt): files written by real PyTorch
// (tests/data/torch/make_fixtures.py). Built without libtorch, the readers' tests skip and one
// test checks that the error says how to convert the file instead.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "../core/test_util.h"
#include "kvlab/dump.h"

namespace {

using namespace kvlab;
using kvtest::message_of;
using ::testing::HasSubstr;

std::string fixture(const std::string& name) { return std::string(KVLAB_TEST_DATA) + "/torch/" + name; }

std::string open_error(const std::string& path) {
  return message_of<std::runtime_error>([&] { open_dump(path); });
}

bool built_with_torch() {
  try {
    open_dump(fixture("stacked.pt"));
  } catch (const std::runtime_error& e) {
    return std::string(e.what()).find("without libtorch") == std::string::npos;
  }
  return true;
}

class TorchDump : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!built_with_torch())
      GTEST_SKIP() << "kvlab was built without libtorch (install libtorch-dev to run these)";
  }
};

// The generators' formula; `bf16` rounds it as torch's .bfloat16() does (nearest even).
float expected(Role role, int64_t layer, int64_t head, int64_t t, int64_t d, bool bf16) {
  const float v = (float)((int)role * 64 + layer * 32 + head * 8 + t + d / 8.0 - 128);
  if (!bf16) return v;
  uint32_t u;
  std::memcpy(&u, &v, 4);
  u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  float r;
  std::memcpy(&r, &u, 4);
  return r;
}

void expect_values(const DumpReader& r) {
  const DumpInfo& in = r.info();
  const bool bf16 = in.dtype == CaptureDtype::BF16;
  for (int64_t l = 0; l < in.num_layers; ++l)
    for (Role role : {Role::Q, Role::K, Role::V, Role::KPreRope}) {
      if (role == Role::KPreRope && !in.has_k_pre_rope) continue;
      const Tensor x = r.read(l, role);
      ASSERT_EQ(x.shape, in.shape(role));
      int64_t i = 0, bad = 0;
      for (int64_t h = 0; h < in.heads(role); ++h)
        for (int64_t t = 0; t < in.tokens; ++t)
          for (int64_t d = 0; d < in.head_dim; ++d) bad += x.data[i++] != expected(role, l, h, t, d, bf16);
      EXPECT_EQ(bad, 0) << "layer " << l << " " << to_string(role);
    }
}

void expect_tiny_sizes(const DumpInfo& in) {
  EXPECT_EQ(in.num_layers, 2);
  EXPECT_EQ(in.num_q_heads, 4);
  EXPECT_EQ(in.num_kv_heads, 2);
  EXPECT_EQ(in.tokens, 5);
  EXPECT_EQ(in.head_dim, 4);
}

TEST(TorchDumpWithout, TheErrorSaysHowToConvert) {
  if (built_with_torch()) GTEST_SKIP() << "built with libtorch: the readers are tested instead";
  const std::string msg = open_error(fixture("stacked.pt"));
  EXPECT_THAT(msg, HasSubstr("stacked.pt"));
  EXPECT_THAT(msg, HasSubstr("libtorch-dev"));
  EXPECT_THAT(msg, HasSubstr("numpy.savez"));
}

TEST(TorchDumpAny, LegacyPickleFormatSaysSaveAgain) {  // recognised with or without libtorch
  const std::string msg = open_error(fixture("bad_legacy.pt"));
  EXPECT_THAT(msg, HasSubstr("bad_legacy.pt' is a bare Python pickle"));
  EXPECT_THAT(msg, HasSubstr("torch 1.6 or later"));
}

TEST_F(TorchDump, DictOfStackedTensorsWithMetadata) {
  const auto r = open_dump(fixture("stacked.pt"));
  const DumpInfo& in = r->info();
  expect_tiny_sizes(in);
  EXPECT_TRUE(in.has_k_pre_rope);
  EXPECT_EQ(in.dtype, CaptureDtype::F32);
  EXPECT_EQ(in.token_ids, (std::vector<int32_t>{1, 22, 333, 4444, 5}));  // a Python list
  EXPECT_EQ(in.rope_theta, 500000.0);
  EXPECT_EQ(in.rope_style, RopeStyle::Halves);
  EXPECT_EQ(in.model, "tiny-model");
  EXPECT_EQ(in.text, "Once upon a time");
  EXPECT_THAT(in.source, HasSubstr("torch.save"));
  expect_values(*r);
}

TEST_F(TorchDump, PerLayerKeysFloat16WithANonContiguousTensor) {
  const auto r = open_dump(fixture("per_layer.pt"));
  expect_tiny_sizes(r->info());
  EXPECT_EQ(r->info().dtype, CaptureDtype::F16);
  EXPECT_EQ(r->info().token_ids, (std::vector<int32_t>{7, 8, 9, 10, 11}));  // an int32 tensor
  EXPECT_EQ(r->info().model, "per_layer");
  EXPECT_EQ(r->info().rope_theta, 10000.0);
  expect_values(*r);
}

TEST_F(TorchDump, ListOfTriplesBfloat16ViewsOfOneStorage) {
  const auto r = open_dump(fixture("triples.pt"));
  expect_tiny_sizes(r->info());
  EXPECT_EQ(r->info().dtype, CaptureDtype::BF16);
  EXPECT_FALSE(r->info().has_k_pre_rope);
  expect_values(*r);
  const Tensor all = r->read(1, Role::K);
  const Tensor one = r->read_head(1, Role::K, 1);
  EXPECT_EQ(one.data, std::vector<float>(all.data.begin() + 20, all.data.end()));
}

TEST_F(TorchDump, KvPairsWithoutQueriesAreRejected) {
  const std::string msg = open_error(fixture("bad_kv_pairs.pt"));
  EXPECT_THAT(msg, HasSubstr("bad_kv_pairs.pt' item 0 is a pair"));
  EXPECT_THAT(msg, HasSubstr("save (q, k, v) per layer"));
}

TEST_F(TorchDump, ListErrorsNameTheItemAndRole) {
  const std::string msg = open_error(fixture("bad_triple_tokens.pt"));
  EXPECT_THAT(msg, HasSubstr("bad_triple_tokens.pt' item 1 (v) has tokens T = 4"));
}

TEST_F(TorchDump, SingleTensorIsRejected) {
  const std::string msg = open_error(fixture("bad_single_tensor.pt"));
  EXPECT_THAT(msg, HasSubstr("single tensor"));
  EXPECT_THAT(msg, HasSubstr("torch.save({'q': q, 'k': k, 'v': v}, path)"));
}

TEST_F(TorchDump, Float64IsRejectedNamingTheEntry) {
  const std::string msg = open_error(fixture("bad_float64.pt"));
  EXPECT_THAT(msg, HasSubstr("bad_float64.pt' entry 'q' has dtype 'float64'"));
  EXPECT_THAT(msg, HasSubstr("x.float()"));
}

TEST_F(TorchDump, GpuTensorsSayMoveToCpu) {
  const std::string msg = open_error(fixture("bad_cuda.pt"));
  EXPECT_THAT(msg, HasSubstr("bad_cuda.pt' holds tensors saved on a GPU"));
  EXPECT_THAT(msg, HasSubstr("x.cpu()"));
  EXPECT_LT(msg.size(), 200u);  // not libtorch's list of backends
}

// stacked.pt with two bytes of its pickle replaced by an unknown opcode; `fix_crc` also updates
// the member's CRC-32 (local header and directory) so that the file reaches libtorch.
std::string broken_pickle(const kvtest::TempDir& dir, bool fix_crc) {
  std::ifstream in(fixture("stacked.pt"), std::ios::binary);
  std::vector<char> b{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  const std::string name = "stacked/data.pkl", proto = "\x80\x02";
  const auto at = std::search(b.begin(), b.end(), name.begin(), name.end());
  const auto pkl = std::search(at, b.end(), proto.begin(), proto.end());
  EXPECT_NE(pkl, b.end());
  pkl[2] = pkl[3] = (char)0xff;  // no such pickle opcode
  if (fix_crc) {
    auto le = [&](size_t i, int n) {
      uint32_t v = 0;
      for (int k = n - 1; k >= 0; --k) v = v << 8 | (uint8_t)b[i + k];
      return v;
    };
    const size_t local = at - b.begin() - 30;
    const auto central = std::search(pkl, b.end(), name.begin(), name.end()) - b.begin() - 46;
    const size_t size = le(central + 20, 4);  // the directory's: the local header may hold zeros
    uint32_t crc = 0xffffffffu;               // CRC-32 (IEEE), bit by bit
    for (size_t i = 0; i < size; ++i) {
      crc ^= (uint8_t)pkl[i];
      for (int k = 0; k < 8; ++k) crc = crc >> 1 ^ (0xedb88320u & (0u - (crc & 1)));
    }
    crc = ~crc;
    for (size_t field : {local + 14, (size_t)central + 16})
      for (int k = 0; k < 4; ++k) b[field + k] = (char)(crc >> (8 * k));
  }
  const std::string path = dir.file(fix_crc ? "broken.pt" : "flipped.pt");
  std::ofstream(path, std::ios::binary).write(b.data(), (std::streamsize)b.size());
  return path;
}

TEST_F(TorchDump, CorruptPickleNamesTheFileAndLibtorchsReason) {
  kvtest::TempDir dir;
  const std::string msg = open_error(broken_pickle(dir, true));
  EXPECT_THAT(msg, HasSubstr("broken.pt': libtorch cannot read it as a torch.save file"));
}

// libtorch checks no CRC; kvlab checks every member's before libtorch sees the file.
TEST_F(TorchDump, FlippedPickleByteFailsItsCrc) {
  kvtest::TempDir dir;
  const std::string msg = open_error(broken_pickle(dir, false));
  EXPECT_THAT(msg, HasSubstr("flipped.pt' member 'stacked/data.pkl': corrupt ZIP member: CRC-32 mismatch"));
}

}  // namespace
