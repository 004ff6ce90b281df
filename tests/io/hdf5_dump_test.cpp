// The HDF5 dump format: round trips for each stored dtype, lazy per-head reads, atomic writes,
// and one test per kind of bad file.
#include <hdf5.h>

#include <filesystem>
#include <fstream>

#include "../core/test_util.h"
#include "kvlab/dump.h"
#include "kvlab/half.h"

namespace {

using kvlab::CaptureDtype;
using kvlab::DumpInfo;
using kvlab::DumpWriter;
using kvlab::Role;
using kvlab::Tensor;
using kvtest::message_of;
using kvtest::TempDir;

DumpInfo tiny_info(CaptureDtype dtype = CaptureDtype::F32) {
  DumpInfo in;
  in.model = "tiny";
  in.num_layers = 2;
  in.num_q_heads = 4;
  in.num_kv_heads = 2;
  in.head_dim = 8;
  in.tokens = 37;  // not a multiple of the chunk
  in.dtype = dtype;
  in.source = "hdf5_dump_test";
  return in;
}

// Distinct values per (layer, role, element), exactly representable in bf16 when `coarse`.
Tensor pattern(const DumpInfo& in, int64_t layer, Role role, bool coarse) {
  Tensor t;
  t.shape = in.shape(role);
  t.data.resize(kvlab::numel(t.shape));
  for (size_t i = 0; i < t.data.size(); ++i) {
    const float x = (float)((int64_t)(i * 7 + layer * 131 + (int)role * 17) % 251 - 125);
    t.data[i] = coarse ? x / 8 : x / 7.3f;
  }
  return t;
}

void write_dump(const std::string& path, const DumpInfo& in, bool coarse = false, bool compress = true) {
  DumpWriter w(path, in, {.compress = compress, .chunk_tokens = 16});
  for (int64_t l = 0; l < in.num_layers; ++l)
    for (Role r : {Role::Q, Role::K, Role::V, Role::KPreRope})
      if (r != Role::KPreRope || in.has_k_pre_rope) w.write(l, r, pattern(in, l, r, coarse).view());
  w.commit();
}

TEST(Hdf5Dump, Float32RoundTripKeepsEveryBitAndTheMetadata) {
  TempDir dir;
  DumpInfo in = tiny_info();
  in.has_k_pre_rope = true;
  in.rope_style = kvlab::RopeStyle::Halves;
  in.rope_theta = 500000;
  in.text = "Once upon a time \xE2\x9C\x93";
  for (int64_t t = 0; t < in.tokens; ++t) in.token_ids.push_back((int32_t)(t * 3 + 1));
  write_dump(dir.file("d.h5"), in);

  auto d = kvlab::open_dump(dir.file("d.h5"));
  const DumpInfo& got = d->info();
  EXPECT_EQ(got.model, "tiny");
  EXPECT_EQ(got.num_layers, 2);
  EXPECT_EQ(got.num_q_heads, 4);
  EXPECT_EQ(got.num_kv_heads, 2);
  EXPECT_EQ(got.head_dim, 8);
  EXPECT_EQ(got.tokens, 37);
  EXPECT_EQ(got.rope_style, kvlab::RopeStyle::Halves);
  EXPECT_EQ(got.rope_theta, 500000);
  EXPECT_TRUE(got.has_k_pre_rope);
  EXPECT_EQ(got.text, in.text);
  EXPECT_EQ(got.token_ids, in.token_ids);
  EXPECT_EQ(got.source, "hdf5_dump_test");
  for (int64_t l = 0; l < 2; ++l)
    for (Role r : {Role::Q, Role::K, Role::V, Role::KPreRope}) {
      const Tensor want = pattern(in, l, r, false), back = d->read(l, r);
      EXPECT_EQ(back.shape, want.shape);
      EXPECT_EQ(back.data, want.data) << "layer " << l << " role " << kvlab::to_string(r);
    }
}

TEST(Hdf5Dump, Float16StoresRoundedValuesAndReadsThemExactly) {
  TempDir dir;
  const DumpInfo in = tiny_info(CaptureDtype::F16);
  write_dump(dir.file("d.h5"), in);
  auto d = kvlab::open_dump(dir.file("d.h5"));
  EXPECT_EQ(d->info().dtype, CaptureDtype::F16);
  const Tensor want = pattern(in, 1, Role::K, false), back = d->read(1, Role::K);
  for (size_t i = 0; i < want.data.size(); ++i)
    ASSERT_EQ(back.data[i], kvlab::round_to_half(want.data[i])) << i;
}

TEST(Hdf5Dump, Bfloat16RoundTripsValuesItCanRepresent) {
  TempDir dir;
  const DumpInfo in = tiny_info(CaptureDtype::BF16);
  write_dump(dir.file("d.h5"), in, /*coarse=*/true);
  auto d = kvlab::open_dump(dir.file("d.h5"));
  EXPECT_EQ(d->info().dtype, CaptureDtype::BF16);
  EXPECT_EQ(d->read(0, Role::V).data, pattern(in, 0, Role::V, true).data);
}

TEST(Hdf5Dump, ReadHeadEqualsTheSliceOfTheWholeRole) {
  TempDir dir;
  const DumpInfo in = tiny_info(CaptureDtype::F16);
  write_dump(dir.file("d.h5"), in, false, /*compress=*/false);
  auto d = kvlab::open_dump(dir.file("d.h5"));
  const Tensor all = d->read(1, Role::Q);
  const int64_t n = in.tokens * in.head_dim;
  for (int64_t h = 0; h < in.num_q_heads; ++h) {
    const Tensor one = d->read_head(1, Role::Q, h);
    EXPECT_EQ(one.shape, (std::vector<int64_t>{1, in.tokens, in.head_dim}));
    EXPECT_TRUE(std::equal(one.data.begin(), one.data.end(), all.data.begin() + h * n)) << "head " << h;
  }
  EXPECT_NE(message_of<std::out_of_range>([&] { d->read_head(1, Role::K, 2); }).find("k head 2 out of range"),
            std::string::npos);
  EXPECT_NE(message_of<std::out_of_range>([&] { d->read(2, Role::K); }).find("layer 2 out of range"),
            std::string::npos);
}

TEST(Hdf5Dump, UncommittedWriterLeavesNoFile) {
  TempDir dir;
  const DumpInfo in = tiny_info();
  {
    DumpWriter w(dir.file("d.h5"), in);
    w.write(0, Role::Q, pattern(in, 0, Role::Q, false).view());
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("d.h5")));
  EXPECT_TRUE(std::filesystem::is_empty(std::filesystem::path(dir.file("d.h5")).parent_path()));
}

TEST(Hdf5Dump, CommitNamesTheMissingDataset) {
  TempDir dir;
  const DumpInfo in = tiny_info();
  DumpWriter w(dir.file("d.h5"), in);
  for (Role r : {Role::Q, Role::K, Role::V}) w.write(0, r, pattern(in, 0, r, false).view());
  w.write(1, Role::Q, pattern(in, 1, Role::Q, false).view());
  EXPECT_NE(message_of<std::runtime_error>([&] { w.commit(); }).find("/layers/1/k was never written"),
            std::string::npos);
}

TEST(Hdf5Dump, WriterRejectsWrongShapeNanRepeatsAndFloat16Overflow) {
  TempDir dir;
  DumpInfo in = tiny_info(CaptureDtype::F16);
  DumpWriter w(dir.file("d.h5"), in);
  Tensor bad = pattern(in, 0, Role::K, false);
  bad.shape = {2, 36, 8};
  bad.data.resize(2 * 36 * 8);
  EXPECT_NE(
      message_of<std::invalid_argument>([&] { w.write(0, Role::K, bad.view()); }).find("expected (2, 37, 8)"),
      std::string::npos);
  Tensor nan = pattern(in, 0, Role::K, false);
  nan.data[5] = NAN;
  EXPECT_NE(message_of<std::invalid_argument>([&] { w.write(0, Role::K, nan.view()); }).find("/layers/0/k"),
            std::string::npos);
  Tensor big = pattern(in, 0, Role::V, false);
  big.data[3] = 70000.f;
  EXPECT_NE(
      message_of<std::invalid_argument>([&] { w.write(0, Role::V, big.view()); }).find("overflows float16"),
      std::string::npos);
  w.write(0, Role::Q, pattern(in, 0, Role::Q, false).view());
  EXPECT_NE(message_of<std::invalid_argument>([&] {
              w.write(0, Role::Q, pattern(in, 0, Role::Q, false).view());
            }).find("written twice"),
            std::string::npos);
}

TEST(Hdf5Dump, InfoRejectsQHeadsNotAMultipleOfKvHeads) {
  TempDir dir;
  DumpInfo in = tiny_info();
  in.num_q_heads = 3;
  EXPECT_NE(message_of<std::invalid_argument>([&] {
              DumpWriter w(dir.file("d.h5"), in);
            }).find("not a multiple of num_kv_heads"),
            std::string::npos);
}

// Edits a committed dump in place with the HDF5 API, to make the bad files below.
template <class F>
void edit(const std::string& path, F&& f) {
  hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  f(file);
  H5Fclose(file);
}

void set_int_attr(hid_t obj, const char* name, int64_t v) {
  hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
  H5Awrite(a, H5T_NATIVE_INT64, &v);
  H5Aclose(a);
}

std::string open_error(const std::string& path) {
  return message_of<std::runtime_error>([&] { kvlab::open_dump(path); });
}

TEST(Hdf5DumpBadInput, MissingDatasetIsNamed) {
  TempDir dir;
  write_dump(dir.file("d.h5"), tiny_info());
  edit(dir.file("d.h5"), [](hid_t f) { H5Ldelete(f, "/layers/1/v", H5P_DEFAULT); });
  const std::string msg = open_error(dir.file("d.h5"));
  EXPECT_NE(msg.find("d.h5"), std::string::npos) << msg;
  EXPECT_NE(msg.find("missing dataset /layers/1/v"), std::string::npos) << msg;
}

TEST(Hdf5DumpBadInput, MismatchedTokensBetweenRolesIsNamed) {
  TempDir dir;
  DumpInfo in = tiny_info();
  write_dump(dir.file("d.h5"), in);
  edit(dir.file("d.h5"), [](hid_t f) {
    H5Ldelete(f, "/layers/0/v", H5P_DEFAULT);
    const hsize_t dims[3] = {2, 36, 8};
    hid_t space = H5Screate_simple(3, dims, nullptr);
    hid_t ds = H5Dcreate2(f, "/layers/0/v", H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dclose(ds);
    H5Sclose(space);
  });
  const std::string msg = open_error(dir.file("d.h5"));
  EXPECT_NE(msg.find("/layers/0/v has shape (2, 36, 8), expected (2, 37, 8)"), std::string::npos) << msg;
}

TEST(Hdf5DumpBadInput, WrongRankIsNamed) {
  TempDir dir;
  write_dump(dir.file("d.h5"), tiny_info());
  edit(dir.file("d.h5"), [](hid_t f) {
    H5Ldelete(f, "/layers/1/q", H5P_DEFAULT);
    const hsize_t dims[2] = {37, 8};
    hid_t space = H5Screate_simple(2, dims, nullptr);
    H5Dclose(H5Dcreate2(f, "/layers/1/q", H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    H5Sclose(space);
  });
  EXPECT_NE(open_error(dir.file("d.h5")).find("/layers/1/q has shape (37, 8), expected (4, 37, 8)"),
            std::string::npos);
}

TEST(Hdf5DumpBadInput, QHeadsNotAMultipleOfKvHeadsInTheFile) {
  TempDir dir;
  write_dump(dir.file("d.h5"), tiny_info());
  edit(dir.file("d.h5"), [](hid_t f) { set_int_attr(f, "num_kv_heads", 3); });
  EXPECT_NE(open_error(dir.file("d.h5")).find("num_q_heads (4) is not a multiple of num_kv_heads (3)"),
            std::string::npos);
}

TEST(Hdf5DumpBadInput, UnknownVersionAndMissingAttribute) {
  TempDir dir;
  write_dump(dir.file("d.h5"), tiny_info());
  edit(dir.file("d.h5"), [](hid_t f) { set_int_attr(f, "format_version", 7); });
  EXPECT_NE(open_error(dir.file("d.h5")).find("format_version 7 is not supported"), std::string::npos);
  edit(dir.file("d.h5"), [](hid_t f) {
    set_int_attr(f, "format_version", 1);
    H5Adelete(f, "head_dim");
  });
  EXPECT_NE(open_error(dir.file("d.h5")).find("missing root attribute 'head_dim'"), std::string::npos);
}

TEST(Hdf5DumpBadInput, NanInTheFileIsReportedWithLayerAndRole) {
  TempDir dir;
  write_dump(dir.file("d.h5"), tiny_info(), false, /*compress=*/false);
  edit(dir.file("d.h5"), [](hid_t f) {
    hid_t ds = H5Dopen2(f, "/layers/1/k", H5P_DEFAULT);
    std::vector<float> v(2 * 37 * 8, 1.f);
    v[100] = INFINITY;
    H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
    H5Dclose(ds);
  });
  auto d = kvlab::open_dump(dir.file("d.h5"));
  const std::string msg = message_of<std::invalid_argument>([&] { d->read(1, Role::K); });
  EXPECT_NE(msg.find("/layers/1/k"), std::string::npos) << msg;
  EXPECT_NE(msg.find("100"), std::string::npos) << msg;
}

TEST(Hdf5DumpBadInput, TruncatedFile) {
  TempDir dir;
  write_dump(dir.file("d.h5"), tiny_info());
  const auto size = std::filesystem::file_size(dir.file("d.h5"));
  std::filesystem::resize_file(dir.file("d.h5"), size / 2);
  const std::string msg = open_error(dir.file("d.h5"));
  EXPECT_NE(msg.find("d.h5"), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated or corrupt"), std::string::npos) << msg;
}

TEST(Hdf5DumpBadInput, CorruptDataChunkIsAReadErrorNotGarbage) {
  TempDir dir;
  write_dump(dir.file("d.h5"), tiny_info());
  // Overwrite the second half of the file (compressed chunks live there) with garbage.
  const auto size = std::filesystem::file_size(dir.file("d.h5"));
  {
    std::fstream f(dir.file("d.h5"), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp((std::streamoff)(size - 600));
    const std::string junk(500, '\x5a');
    f.write(junk.data(), (std::streamsize)junk.size());
  }
  std::string msg;
  try {
    auto d = kvlab::open_dump(dir.file("d.h5"));
    for (int64_t l = 0; l < 2; ++l)
      for (Role r : {Role::Q, Role::K, Role::V}) d->read(l, r);
  } catch (const std::exception& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("d.h5"), std::string::npos) << "corruption went unnoticed: '" << msg << "'";
}

TEST(Hdf5DumpBadInput, NotAnHdf5FileAndMissingFile) {
  TempDir dir;
  std::ofstream(dir.file("x.h5")) << "hello";
  EXPECT_NE(open_error(dir.file("x.h5")).find("x.h5"), std::string::npos);
  EXPECT_NE(open_error(dir.file("absent.h5")).find("absent.h5"), std::string::npos);
}

}  // namespace
