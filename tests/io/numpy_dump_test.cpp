// NumPy sources read as dumps (open_dump on .npz and .npy directories): each layout written by
// real numpy (tests/data/dumps/make_fixtures.py), savez_compressed and ZIP64, lazy slices, and
// one test per kind of bad input.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "../core/test_util.h"
#include "kvlab/dump.h"
#include "kvlab/npy.h"

namespace {

using namespace kvlab;
using kvtest::message_of;
using kvtest::TempDir;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

std::string fixture(const std::string& name) { return std::string(KVLAB_TEST_DATA) + "/dumps/" + name; }

// The generator's formula (make_fixtures.py): exact in float16 and float32.
float expected(Role role, int64_t layer, int64_t head, int64_t t, int64_t d) {
  return (float)((int)role * 64 + layer * 32 + head * 8 + t + d / 8.0 - 128);
}

// Every element of every layer and role equals the formula.
void expect_values(const DumpReader& r) {
  const DumpInfo& in = r.info();
  for (int64_t l = 0; l < in.num_layers; ++l)
    for (Role role : {Role::Q, Role::K, Role::V, Role::KPreRope}) {
      if (role == Role::KPreRope && !in.has_k_pre_rope) continue;
      const Tensor x = r.read(l, role);
      ASSERT_EQ(x.shape, in.shape(role));
      int64_t i = 0, bad = 0;
      for (int64_t h = 0; h < in.heads(role); ++h)
        for (int64_t t = 0; t < in.tokens; ++t)
          for (int64_t d = 0; d < in.head_dim; ++d) bad += x.data[i++] != expected(role, l, h, t, d);
      EXPECT_EQ(bad, 0) << "layer " << l << " " << to_string(role);
    }
}

void expect_tiny_sizes(const DumpInfo& in) {
  EXPECT_EQ(in.num_layers, 2);
  EXPECT_EQ(in.num_q_heads, 4);
  EXPECT_EQ(in.num_kv_heads, 2);
  EXPECT_EQ(in.tokens, 5);
  EXPECT_EQ(in.head_dim, 4);
  EXPECT_TRUE(in.k_after_rope);
}

std::string open_error(const std::string& path) {
  return message_of<std::runtime_error>([&] { open_dump(path); });
}

std::vector<char> bytes_of(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}
void write_bytes(const std::string& path, const std::vector<char>& b) {
  std::ofstream(path, std::ios::binary).write(b.data(), (std::streamsize)b.size());
}

// ---------------------------------------------------------------------------------------------
// Layouts.

TEST(NumpyDump, StackedNpzWithEveryMetadataEntry) {
  const auto r = open_dump(fixture("stacked.npz"));
  const DumpInfo& in = r->info();
  expect_tiny_sizes(in);
  EXPECT_TRUE(in.has_k_pre_rope);
  EXPECT_EQ(in.dtype, CaptureDtype::F32);
  EXPECT_EQ(in.token_ids, (std::vector<int32_t>{1, 22, 333, 4444, 5}));
  EXPECT_EQ(in.rope_theta, 500000.0);
  EXPECT_EQ(in.rope_style, RopeStyle::Halves);
  EXPECT_EQ(in.model, "tiny-model");
  EXPECT_EQ(in.text, "Once upon a time");
  EXPECT_THAT(in.source, HasSubstr("stacked.npz"));
  expect_values(*r);
}

TEST(NumpyDump, SavezCompressedFloat16TakesTheDefaults) {
  const auto r = open_dump(fixture("stacked_compressed.npz"));
  const DumpInfo& in = r->info();
  expect_tiny_sizes(in);
  EXPECT_FALSE(in.has_k_pre_rope);
  EXPECT_EQ(in.dtype, CaptureDtype::F16);
  EXPECT_EQ(in.model, "stacked_compressed");  // the file name
  EXPECT_EQ(in.rope_theta, 10000.0);
  EXPECT_EQ(in.rope_style, RopeStyle::Adjacent);
  EXPECT_TRUE(in.token_ids.empty());
  EXPECT_THROW(r->read(0, Role::KPreRope), std::runtime_error);
  expect_values(*r);
}

TEST(NumpyDump, PerLayerNamesLikeTheHdf5Paths) {
  const auto r = open_dump(fixture("per_layer.npz"));
  expect_tiny_sizes(r->info());
  EXPECT_TRUE(r->info().has_k_pre_rope);
  expect_values(*r);
}

TEST(NumpyDump, PerLayerFlatNamesCompressed) {
  const auto r = open_dump(fixture("per_layer_flat.npz"));
  expect_tiny_sizes(r->info());
  EXPECT_EQ(r->info().dtype, CaptureDtype::F16);
  expect_values(*r);
}

TEST(NumpyDump, DirectoryOfStackedNpy) {
  const auto r = open_dump(fixture("npy_dir_stacked"));
  expect_tiny_sizes(r->info());
  EXPECT_EQ(r->info().rope_theta, 20000.0);  // from rope_theta.npy
  EXPECT_EQ(r->info().model, "npy_dir_stacked");
  expect_values(*r);
}

TEST(NumpyDump, DirectoryOfPerLayerNpyWithTrailingSlash) {
  const auto r = open_dump(fixture("npy_dir_layers/"));
  expect_tiny_sizes(r->info());
  EXPECT_EQ(r->info().model, "npy_dir_layers");
  expect_values(*r);
}

TEST(NumpyDump, NestedDirectoryLikeTheHdf5Paths) {
  TempDir dir;
  const NpzReader npz(fixture("per_layer.npz"));
  for (const auto& name : npz.names()) {
    fs::create_directories(fs::path(dir.file(name)).parent_path());
    write_npy(dir.file(name + ".npy"), npz.read(name));  // dir/layers/0/q.npy
  }
  const auto r = open_dump(dir.file(""));
  EXPECT_TRUE(r->info().has_k_pre_rope);
  expect_values(*r);
}

TEST(NumpyDump, Zip64RecordsAreRead) {
  const auto r = open_dump(fixture("stacked_zip64.npz"));
  expect_tiny_sizes(r->info());
  expect_values(*r);
}

TEST(NumpyDump, ReadHeadIsTheSliceOfRead) {
  for (const char* f : {"stacked.npz", "stacked_compressed.npz", "per_layer_flat.npz", "npy_dir_stacked"}) {
    SCOPED_TRACE(f);
    const auto r = open_dump(fixture(f));
    const Tensor all = r->read(1, Role::Q);
    const int64_t n = 5 * 4;
    for (int64_t h = 0; h < 4; ++h) {
      const Tensor one = r->read_head(1, Role::Q, h);
      EXPECT_EQ(one.shape, (std::vector<int64_t>{1, 5, 4}));
      EXPECT_EQ(one.data, std::vector<float>(all.data.begin() + h * n, all.data.begin() + (h + 1) * n));
    }
    const LayerKV lk = r->read_layer(0);
    EXPECT_EQ(lk.v.data, r->read(0, Role::V).data);
  }
}

TEST(NumpyDump, RangeChecksNameTheFile) {
  const auto r = open_dump(fixture("stacked.npz"));
  EXPECT_THAT(message_of<std::out_of_range>([&] { r->read(2, Role::Q); }), HasSubstr("stacked.npz"));
  EXPECT_THROW(r->read_head(0, Role::K, 2), std::out_of_range);
}

TEST(NumpyDump, ReadNpzReadsNumpysOwnFileAndRoundTripsOurs) {
  const auto arrays = read_npz(fixture("stacked.npz"));
  ASSERT_EQ(arrays.size(), 9u);
  EXPECT_EQ(arrays[0].first, "q");
  EXPECT_EQ(arrays[0].second.shape, (std::vector<int64_t>{2, 4, 5, 4}));
  EXPECT_EQ(arrays[5].first, "rope_theta");
  EXPECT_EQ(arrays[5].second.descr, "<f8");

  TempDir dir;
  const std::vector<std::pair<std::string, NpyArray>> ours = {
      {"a", make_npy(std::vector<float>{1.5f, -2, 3}, {3})},
      {"layers/0/b", make_npy(std::vector<uint8_t>{7, 8}, {2, 1})}};
  write_npz(dir.file("x.npz"), ours);
  const auto back = read_npz(dir.file("x.npz"));
  ASSERT_EQ(back.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(back[i].first, ours[i].first);
    EXPECT_EQ(back[i].second.descr, ours[i].second.descr);
    EXPECT_EQ(back[i].second.shape, ours[i].second.shape);
    EXPECT_EQ(back[i].second.bytes, ours[i].second.bytes);
  }
}

// ---------------------------------------------------------------------------------------------
// Bad input: one problem per test, each error naming the file (and member).

TEST(NumpyDumpBad, SingleNpySaysHowToSaveRoles) {
  const std::string msg = open_error(fixture("single_stacked.npy"));
  EXPECT_THAT(msg, HasSubstr("single_stacked.npy"));
  EXPECT_THAT(msg, HasSubstr("numpy.savez('dump.npz', q=q, k=k, v=v)"));
}

TEST(NumpyDumpBad, MissingRole) {
  const std::string msg = open_error(fixture("bad_missing_role.npz"));
  EXPECT_THAT(msg, HasSubstr("bad_missing_role.npz"));
  EXPECT_THAT(msg, HasSubstr("no 'v'"));
}

TEST(NumpyDumpBad, MissingRoleOfOneLayerNamesTheExpectedMember) {
  const std::string msg = open_error(fixture("bad_missing_layer_role.npz"));
  EXPECT_THAT(msg, HasSubstr("layer 1 has no k"));
  EXPECT_THAT(msg, HasSubstr("'layers/1/k'"));
}

TEST(NumpyDumpBad, WrongRank) {
  const std::string msg = open_error(fixture("bad_rank.npz"));
  EXPECT_THAT(msg, HasSubstr("bad_rank.npz' member 'k'"));
  EXPECT_THAT(msg, HasSubstr("expected rank 4 (L, H, T, D), found shape (2, 5, 4)"));
}

TEST(NumpyDumpBad, BatchDimensionGetsAHint) {
  const std::string msg = open_error(fixture("bad_batch_dim.npz"));
  EXPECT_THAT(msg, HasSubstr("member 'v'"));
  EXPECT_THAT(msg, HasSubstr("drop the leading batch dimension"));
}

TEST(NumpyDumpBad, LayerCountsDiffer) {
  const std::string msg = open_error(fixture("bad_layer_count.npz"));
  EXPECT_THAT(msg, HasSubstr("member 'v' has 3 layers"));
  EXPECT_THAT(msg, HasSubstr("has 2"));
}

TEST(NumpyDumpBad, TokensDiffer) {
  const std::string msg = open_error(fixture("bad_tokens.npz"));
  EXPECT_THAT(msg, HasSubstr("member 'v' has tokens T = 4"));
  EXPECT_THAT(msg, HasSubstr("member 'q' has 5"));
}

TEST(NumpyDumpBad, HeadDimDiffers) {
  const std::string msg = open_error(fixture("bad_head_dim.npz"));
  EXPECT_THAT(msg, HasSubstr("member 'k' has head_dim D = 2"));
}

TEST(NumpyDumpBad, QueryHeadsNotAMultipleOfKvHeads) {
  const std::string msg = open_error(fixture("bad_gqa.npz"));
  EXPECT_THAT(msg, HasSubstr("member 'q' has 3 heads, not a multiple of the 2 heads"));
}

TEST(NumpyDumpBad, IntegerArrays) {
  const std::string msg = open_error(fixture("bad_int_dtype.npz"));
  EXPECT_THAT(msg, HasSubstr("bad_int_dtype.npz' member 'q' has dtype '<i4'"));
}

TEST(NumpyDumpBad, Float64SaysHowToConvert) {
  const std::string msg = open_error(fixture("bad_float64.npz"));
  EXPECT_THAT(msg, HasSubstr("dtype 'float64'"));
  EXPECT_THAT(msg, HasSubstr("astype(np.float32)"));
}

TEST(NumpyDumpBad, MixedDtypes) {
  const std::string msg = open_error(fixture("bad_mixed_dtype.npz"));
  EXPECT_THAT(msg, HasSubstr("member 'v' has dtype float16"));
}

TEST(NumpyDumpBad, MixedLayouts) {
  const std::string msg = open_error(fixture("bad_mixed_layout.npz"));
  EXPECT_THAT(msg, HasSubstr("mixes stacked arrays"));
}

TEST(NumpyDumpBad, NoRolesListsWhatItHoldsAndWhatIsAccepted) {
  const std::string msg = open_error(fixture("bad_no_roles.npz"));
  EXPECT_THAT(msg, HasSubstr("it holds: keys, values"));
  EXPECT_THAT(msg, HasSubstr("layer_<i>_<role>"));
}

TEST(NumpyDumpBad, TokenIdsOfTheWrongLength) {
  const std::string msg = open_error(fixture("bad_token_ids.npz"));
  EXPECT_THAT(msg, HasSubstr("member 'token_ids' has 4 entries for 5 tokens"));
}

TEST(NumpyDumpBad, NanIsReportedWhenTheLayerIsRead) {
  const auto r = open_dump(fixture("bad_nan.npz"));  // opening reads headers only
  EXPECT_NO_THROW(r->read(0, Role::V));
  const std::string msg = message_of<std::runtime_error>([&] { r->read(1, Role::V); });
  EXPECT_THAT(msg, HasSubstr("bad_nan.npz' member 'v' (layer 1, v)"));
  EXPECT_THAT(msg, HasSubstr("flat index 14"));
}

TEST(NumpyDumpBad, TruncatedZip) {
  TempDir dir;
  auto b = bytes_of(fixture("stacked.npz"));
  b.resize(b.size() / 2);
  write_bytes(dir.file("cut.npz"), b);
  const std::string msg = open_error(dir.file("cut.npz"));
  EXPECT_THAT(msg, HasSubstr("cut.npz"));
  EXPECT_THAT(msg, HasSubstr("truncated"));
}

TEST(NumpyDumpBad, CorruptStoredMemberFailsItsCrc) {
  TempDir dir;
  auto b = bytes_of(fixture("per_layer.npz"));
  const std::string marker = "layers/1/v.npy", magic = "\x93NUMPY";  // local header name, then the .npy
  const auto name = std::search(b.begin(), b.end(), marker.begin(), marker.end());
  const auto npy = std::search(name, b.end(), magic.begin(), magic.end()) - b.begin();
  const int hlen = (uint8_t)b[npy + 8] | ((uint8_t)b[npy + 9] << 8);
  b[npy + 10 + hlen + 7] ^= 0x40;  // a data byte
  write_bytes(dir.file("flip.npz"), b);
  // Checked when the archive is opened, so every command (info, eval) refuses the file.
  const std::string msg = open_error(dir.file("flip.npz"));
  EXPECT_THAT(msg, HasSubstr("flip.npz' member 'layers/1/v.npy'"));
  EXPECT_THAT(msg, HasSubstr("CRC-32"));
}

TEST(NumpyDumpBad, CorruptDeflateData) {
  TempDir dir;
  auto b = bytes_of(fixture("stacked_compressed.npz"));
  const std::string marker = "v.npy";
  const auto at = std::search(b.begin(), b.end(), marker.begin(), marker.end()) - b.begin();
  for (int i = 30; i < 60; ++i) b[at + marker.size() + 20 + i] = (char)0xff;  // garbage codes
  write_bytes(dir.file("bad.npz"), b);
  const std::string msg = message_of<std::runtime_error>([&] {
    const auto r = open_dump(dir.file("bad.npz"));
    r->read(1, Role::V);
  });
  EXPECT_THAT(msg, HasSubstr("bad.npz' member 'v.npy'"));
  EXPECT_THAT(msg, HasSubstr("deflate"));
}

TEST(NumpyDumpBad, MissingPath) {
  const std::string msg = open_error(fixture("no_such_dump.npz"));
  EXPECT_THAT(msg, HasSubstr("no_such_dump.npz': no such file or directory"));
  EXPECT_THAT(msg, HasSubstr(".npz"));  // lists what is accepted
}

TEST(NumpyDumpBad, UnknownFormatListsTheAcceptedOnes) {
  TempDir dir;
  std::ofstream(dir.file("notes.txt")) << "not a dump";
  const std::string msg = open_error(dir.file("notes.txt"));
  EXPECT_THAT(msg, HasSubstr("notes.txt': unknown format"));
  EXPECT_THAT(msg, HasSubstr("HDF5"));
  EXPECT_THAT(msg, HasSubstr("torch.save"));
}

TEST(NumpyDumpBad, EmptyDirectory) {
  TempDir dir;
  const std::string msg = open_error(dir.file(""));
  EXPECT_THAT(msg, HasSubstr("no q/k/v arrays found (it holds: nothing)"));
}

}  // namespace
