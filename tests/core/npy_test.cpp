// datasets npy.h: .npy write/read round trips, numpy-written files, and .npz archives.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "kvlab/npy.h"
#include "test_util.h"

namespace {

using namespace kvlab;
using ::testing::HasSubstr;

std::vector<uint8_t> file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

std::string fixture(const std::string& name) { return std::string(KVLAB_TEST_DATA) + "/npy/" + name; }

const std::vector<std::vector<int64_t>> kShapes = {{7}, {3, 5}, {2, 3, 4}, {2, 1, 3, 5}};

NpyArray sample(int kind, const std::vector<int64_t>& shape, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t n = kvlab::numel(shape);
  if (kind == 0) {
    std::vector<float> v(n);
    for (auto& x : v) x = std::uniform_real_distribution<float>(-9, 9)(rng);
    return make_npy(v, shape);
  }
  if (kind == 1) {
    std::vector<uint16_t> v(n);
    for (auto& x : v) x = (uint16_t)rng();
    return make_npy(v, shape);
  }
  std::vector<uint8_t> v(n);
  for (auto& x : v) x = (uint8_t)rng();
  return make_npy(v, shape);
}

TEST(Npy, WriteReadRoundTripF2F4U1AllRanks) {
  kvtest::TempDir dir;
  const char* descr[] = {"<f4", "<f2", "|u1"};
  for (int kind = 0; kind < 3; ++kind)
    for (const auto& shape : kShapes) {
      SCOPED_TRACE(std::string(descr[kind]) + " " + shape_string(shape));
      const NpyArray a = sample(kind, shape, (uint32_t)(kind * 10 + shape.size()));
      ASSERT_EQ(a.descr, descr[kind]);
      const std::string path = dir.file("a.npy");
      write_npy(path, a);
      const NpyArray b = read_npy(path);
      EXPECT_EQ(b.descr, a.descr);
      EXPECT_EQ(b.shape, shape);
      EXPECT_EQ(b.bytes, a.bytes);
      EXPECT_EQ(b.numel(), kvlab::numel(shape));
      EXPECT_EQ(b.item_size(), kind == 0 ? 4u : kind == 1 ? 2u : 1u);
      // NEP 1, version 1.0: magic, then a header padded so the data starts at a multiple of 64
      const std::vector<uint8_t> raw = file_bytes(path);
      ASSERT_GE(raw.size(), 10u);
      EXPECT_EQ(std::memcmp(raw.data(), "\x93NUMPY\x01\x00", 8), 0);
      const size_t hlen = raw[8] | raw[9] << 8;
      EXPECT_EQ((10 + hlen) % 64, 0u);
      EXPECT_EQ(raw[10 + hlen - 1], '\n');
      EXPECT_EQ(raw.size(), 10 + hlen + a.bytes.size());
      EXPECT_EQ(raw, npy_bytes(a));
      const std::string header(raw.begin() + 10, raw.begin() + 10 + hlen);
      EXPECT_THAT(header, HasSubstr(std::string("'descr': '") + descr[kind] + "'"));
      EXPECT_THAT(header, HasSubstr("'fortran_order': False"));
      EXPECT_THAT(header, HasSubstr("'shape': " + shape_string(shape)));  // "(7,)" for 1-D
    }
}

TEST(Npy, AsTensorViewsF2AndF4) {
  const NpyArray f4 = make_npy(std::vector<float>{1.5f, -2.0f, 3.25f, 0.0f, 8.0f, -0.5f}, {2, 3});
  const TensorView t4 = as_tensor(f4, "f4");
  EXPECT_EQ(t4.dtype, DType::F32);
  EXPECT_EQ(t4.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(t4.at(2), 3.25f);
  // fp16 bits: 0x3c00 = 1, 0xc000 = -2, 0x7bff = 65504, 0x0001 = 2^-24
  const NpyArray f2 = make_npy(std::vector<uint16_t>{0x3c00, 0xc000, 0x7bff, 0x0001}, {4, 1});
  const TensorView t2 = as_tensor(f2, "f2");
  EXPECT_EQ(t2.dtype, DType::F16);
  EXPECT_EQ(t2.at(0), 1.0f);
  EXPECT_EQ(t2.at(1), -2.0f);
  EXPECT_EQ(t2.at(2), 65504.0f);
  EXPECT_EQ(t2.at(3), std::ldexp(1.0f, -24));
  EXPECT_THROW(as_tensor(make_npy(std::vector<uint8_t>{1, 2}, {2}), "u1"), std::runtime_error);
}

TEST(Npy, MakeNpyChecksTheShape) { EXPECT_THROW(make_npy(std::vector<float>(5), {2, 3}), std::logic_error); }

// Files written by numpy 1.24 (np.save; np.lib.format.write_array for version 2.0), values chosen
// to be exact: see the comments.
TEST(Npy, ReadsNumpyWrittenFiles) {
  // np.arange(6, dtype=float16).reshape(2, 3) * 0.5
  const NpyArray f2 = read_npy(fixture("numpy_f2_2x3.npy"));
  EXPECT_EQ(f2.descr, "<f2");
  EXPECT_EQ(f2.shape, (std::vector<int64_t>{2, 3}));
  const TensorView t = as_tensor(f2, "f2");
  for (int i = 0; i < 6; ++i) EXPECT_EQ(t.at(i), 0.5f * i);
  // format 2.0 (4-byte header length), np.array([1.25, -2, 3e-8, 65504], dtype='<f4')
  const NpyArray v2 = read_npy(fixture("numpy_f4_v2.npy"));
  EXPECT_EQ(v2.shape, (std::vector<int64_t>{4}));
  const TensorView t2 = as_tensor(v2, "v2");
  EXPECT_EQ(t2.at(0), 1.25f);
  EXPECT_EQ(t2.at(1), -2.0f);
  EXPECT_EQ(t2.at(2), 3e-8f);
  EXPECT_EQ(t2.at(3), 65504.0f);
  // np.arange(8, dtype=uint8).reshape(2, 2, 2)
  const NpyArray u1 = read_npy(fixture("numpy_u1_2x2x2.npy"));
  EXPECT_EQ(u1.descr, "|u1");
  EXPECT_EQ(u1.shape, (std::vector<int64_t>{2, 2, 2}));
  EXPECT_EQ(u1.bytes, (std::vector<uint8_t>{0, 1, 2, 3, 4, 5, 6, 7}));
}

TEST(Npy, RejectsFortranOrderNamingTheFile) {
  const std::string path = fixture("numpy_f4_fortran.npy");
  const std::string msg = kvtest::message_of<std::runtime_error>([&] { read_npy(path); });
  EXPECT_THAT(msg, HasSubstr(path));
  EXPECT_THAT(msg, HasSubstr("Fortran"));
}

TEST(Npy, RejectsBigEndianNamingTheFile) {
  const std::string path = fixture("numpy_f4_bigendian.npy");
  const std::string msg = kvtest::message_of<std::runtime_error>([&] { read_npy(path); });
  EXPECT_THAT(msg, HasSubstr(path));
  EXPECT_THAT(msg, HasSubstr("big-endian"));
}

TEST(Npy, RejectsBadMagic) {
  kvtest::TempDir dir;
  const std::string path = dir.file("not.npy");
  std::ofstream(path) << "PK this is not an npy file at all";
  const std::string msg = kvtest::message_of<std::runtime_error>([&] { read_npy(path); });
  EXPECT_THAT(msg, HasSubstr(path));
  EXPECT_THAT(msg, HasSubstr("magic"));
}

// ---------------------------------------------------------------------------------------------
// .npz

uint32_t crc32_ref(const uint8_t* p, size_t n) {  // the ZIP CRC-32 (reflected 0xEDB88320)
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
  }
  return ~c;
}
uint32_t le16(const std::vector<uint8_t>& b, size_t at) { return b[at] | b[at + 1] << 8; }
uint32_t le32(const std::vector<uint8_t>& b, size_t at) { return le16(b, at) | le16(b, at + 2) << 16; }

std::vector<std::pair<std::string, NpyArray>> npz_arrays() {
  return {
      {"k", make_npy(std::vector<float>{-1.0f, -0.5f, 0.0f, 0.5f, 1.0f, 1.5f}, {2, 3})},
      {"codes", make_npy(std::vector<uint8_t>{0, 1, 2, 254, 255}, {5})},
      {"h", make_npy(std::vector<uint16_t>{0x3c00, 0xc000, 0x3800, 0x7bff}, {2, 2})},  // 1, -2, 0.5, 65504
  };
}

TEST(Npz, ZipStructure) {
  ASSERT_EQ(crc32_ref(reinterpret_cast<const uint8_t*>("123456789"), 9),
            0xcbf43926u);  // the CRC-32 check value
  kvtest::TempDir dir;
  const std::string path = dir.file("out.npz");
  const auto arrays = npz_arrays();
  write_npz(path, arrays);
  const std::vector<uint8_t> z = file_bytes(path);
  // end of central directory: the last 22 bytes (no comment)
  ASSERT_GE(z.size(), 22u);
  const size_t eocd = z.size() - 22;
  ASSERT_EQ(le32(z, eocd), 0x06054b50u);
  EXPECT_EQ(le16(z, eocd + 8), arrays.size());
  EXPECT_EQ(le16(z, eocd + 10), arrays.size());
  const size_t cd_size = le32(z, eocd + 12), cd_at = le32(z, eocd + 16);
  EXPECT_EQ(cd_at + cd_size, eocd);
  size_t at = cd_at;
  for (const auto& [name, arr] : arrays) {
    SCOPED_TRACE(name);
    ASSERT_EQ(le32(z, at), 0x02014b50u);  // central directory entry
    EXPECT_EQ(le16(z, at + 10), 0u);      // method 0: stored
    const uint32_t crc = le32(z, at + 16), csize = le32(z, at + 20), usize = le32(z, at + 24);
    const size_t nlen = le16(z, at + 28), elen = le16(z, at + 30), clen = le16(z, at + 32);
    EXPECT_EQ(std::string(z.begin() + at + 46, z.begin() + at + 46 + nlen), name + ".npy");
    const size_t local = le32(z, at + 42);
    ASSERT_EQ(le32(z, local), 0x04034b50u);  // local file header
    EXPECT_EQ(le32(z, local + 14), crc);
    const size_t data_at = local + 30 + le16(z, local + 26) + le16(z, local + 28);
    const std::vector<uint8_t> member(z.begin() + data_at, z.begin() + data_at + csize);
    EXPECT_EQ(csize, usize);
    EXPECT_EQ(member, npy_bytes(arr));
    EXPECT_EQ(crc32_ref(member.data(), member.size()), crc);
    at += 46 + nlen + elen + clen;
  }
  EXPECT_EQ(at, eocd);
}

TEST(Npz, NumpyLoadsIt) {
  const char* py = "/usr/bin/python3";
  if (std::system((std::string(py) + " -c 'import numpy' > /dev/null 2>&1").c_str()) != 0)
    GTEST_SKIP() << "no /usr/bin/python3 with numpy: cannot check the .npz with numpy.load";
  kvtest::TempDir dir;
  const std::string path = dir.file("out.npz"), script = dir.file("check.py");
  write_npz(path, npz_arrays());
  std::ofstream(script)
      << "import sys, numpy\n"
         "d = numpy.load(sys.argv[1])\n"
         "assert sorted(d.files) == ['codes', 'h', 'k'], d.files\n"
         "k, c, h = d['k'], d['codes'], d['h']\n"
         "assert k.dtype == numpy.float32 and k.shape == (2, 3), (k.dtype, k.shape)\n"
         "assert (k == numpy.arange(6, dtype=numpy.float32).reshape(2, 3) * 0.5 - 1).all(), k\n"
         "assert c.dtype == numpy.uint8 and c.shape == (5,) and c.tolist() == [0, 1, 2, 254, 255], c\n"
         "assert h.dtype == numpy.float16 and h.shape == (2, 2), (h.dtype, h.shape)\n"
         "assert h.tolist() == [[1.0, -2.0], [0.5, 65504.0]], h\n";
  const int rc = std::system((std::string(py) + " " + script + " " + path).c_str());
  EXPECT_EQ(rc, 0) << "numpy.load rejected the archive or its contents (see the Python traceback above)";
}

}  // namespace
