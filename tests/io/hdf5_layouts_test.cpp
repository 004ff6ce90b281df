// Every way HDF5 can store a dump's datasets reads back as the values libhdf5 wrote, bit for
// bit: the layouts kvlab decodes itself (contiguous, chunked with any chunk shape, shuffle and
// deflate in either order, big-endian types) and the ones it
// leaves to libhdf5 in a child process (compact storage, the fletcher32 filter).
#include <hdf5.h>

#include <cstring>
#include <functional>

#include "../core/test_util.h"
#include "kvlab/dump.h"

namespace {

using kvlab::Role;
using kvtest::TempDir;

constexpr int64_t kQHeads = 4, kKvHeads = 2, kTokens = 37, kDim = 8;

// Exactly representable in float16 and bfloat16, distinct per role and element.
float value(Role r, int64_t i) { return (float)((i * 7 + (int)r * 17) % 251 - 125) / 8; }

uint16_t bf16_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return (uint16_t)(u >> 16);  // exact: the values above have at most 8 significant bits
}

void int_attr(hid_t obj, const char* name, int64_t v) {
  hid_t space = H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate2(obj, name, H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(a, H5T_NATIVE_INT64, &v);
  H5Aclose(a);
  H5Sclose(space);
}

void string_attr(hid_t obj, const char* name, const std::string& v) {
  hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, v.size());
  hid_t space = H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate2(obj, name, t, space, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(a, t, v.data());
  H5Aclose(a);
  H5Sclose(space);
  H5Tclose(t);
}

hid_t half(H5T_order_t order) {  // IEEE float16 as h5py builds it
  hid_t t = H5Tcopy(H5T_IEEE_F32LE);
  H5Tset_fields(t, 15, 10, 5, 0, 10);
  H5Tset_size(t, 2);
  H5Tset_ebias(t, 15);
  H5Tset_order(t, order);
  return t;
}

enum class Kind { F32, F16, BF16 };

// One layer, q/k/v stored as `file_type` with the creation properties `setup` gives.
void write_dump(const std::string& path, hid_t file_type, Kind kind,
                const std::function<void(hid_t)>& setup) {
  hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  string_attr(f, "format", "kvlab-kv-dump");
  int_attr(f, "format_version", 1);
  int_attr(f, "num_layers", 1);
  int_attr(f, "num_q_heads", kQHeads);
  int_attr(f, "num_kv_heads", kKvHeads);
  int_attr(f, "head_dim", kDim);
  int_attr(f, "num_tokens", kTokens);
  string_attr(f, "dtype", kind == Kind::F32 ? "float32" : kind == Kind::F16 ? "float16" : "bfloat16");
  hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
  H5Pset_create_intermediate_group(lcpl, 1);
  for (Role r : {Role::Q, Role::K, Role::V}) {
    const hsize_t dims[3] = {(hsize_t)(r == Role::Q ? kQHeads : kKvHeads), kTokens, kDim};
    const int64_t n = (int64_t)(dims[0] * dims[1] * dims[2]);
    hid_t space = H5Screate_simple(3, dims, nullptr);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    setup(dcpl);
    const std::string name = std::string("/layers/0/") + kvlab::to_string(r);
    hid_t ds = H5Dcreate2(f, name.c_str(), file_type, space, lcpl, dcpl, H5P_DEFAULT);
    ASSERT_GE(ds, 0) << name;
    std::vector<float> x(n);
    std::vector<uint16_t> bits(n);
    for (int64_t i = 0; i < n; ++i) bits[i] = bf16_bits(x[i] = value(r, i));
    if (kind == Kind::BF16) {
      string_attr(ds, "dtype", "bfloat16");
      // The same bits into a signed or unsigned type: no conversion.
      const hid_t mem = H5Tget_sign(file_type) == H5T_SGN_2 ? H5T_NATIVE_INT16 : H5T_NATIVE_UINT16;
      ASSERT_GE(H5Dwrite(ds, mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, bits.data()), 0);
    } else {
      ASSERT_GE(H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, x.data()), 0);
    }
    H5Dclose(ds);
    H5Pclose(dcpl);
    H5Sclose(space);
  }
  H5Pclose(lcpl);
  H5Fclose(f);
}

// Every role whole and head by head, compared bit for bit with what was written.
void expect_values(const std::string& path) {
  auto d = kvlab::open_dump(path);
  for (Role r : {Role::Q, Role::K, Role::V}) {
    const kvlab::Tensor all = d->read(0, r);
    const int64_t heads = d->info().heads(r), per_head = kTokens * kDim;
    ASSERT_EQ((int64_t)all.data.size(), heads * per_head);
    int64_t wrong = 0;
    for (int64_t i = 0; i < heads * per_head; ++i) wrong += all.data[i] != value(r, i);
    EXPECT_EQ(wrong, 0) << kvlab::to_string(r);
    for (int64_t h = 0; h < heads; ++h) {
      const kvlab::Tensor one = d->read_head(0, r, h);
      int64_t off = 0;
      for (int64_t i = 0; i < per_head; ++i) off += one.data[i] != value(r, h * per_head + i);
      EXPECT_EQ(off, 0) << kvlab::to_string(r) << " head " << h;
    }
  }
}

void chunks(hid_t dcpl, hsize_t a, hsize_t b, hsize_t c) {
  const hsize_t dims[3] = {a, b, c};
  H5Pset_chunk(dcpl, 3, dims);
}

TEST(Hdf5Layouts, ContiguousBothByteOrders) {
  TempDir dir;
  for (hid_t t : {H5T_IEEE_F32LE, H5T_IEEE_F32BE}) {
    write_dump(dir.file("d.h5"), t, Kind::F32, [](hid_t) {});
    expect_values(dir.file("d.h5"));
  }
}

TEST(Hdf5Layouts, ChunkedUnfilteredAnyChunkShape) {
  TempDir dir;
  write_dump(dir.file("d.h5"), H5T_IEEE_F32LE, Kind::F32, [](hid_t p) { chunks(p, 1, 16, 8); });
  expect_values(dir.file("d.h5"));
  // Chunks across heads, with partial chunks at the edge of every dimension.
  write_dump(dir.file("d.h5"), H5T_IEEE_F32LE, Kind::F32, [](hid_t p) { chunks(p, 2, 5, 3); });
  expect_values(dir.file("d.h5"));
}

TEST(Hdf5Layouts, DeflateAloneAndShuffleInEitherOrder) {
  TempDir dir;
  write_dump(dir.file("d.h5"), H5T_IEEE_F32LE, Kind::F32, [](hid_t p) {
    chunks(p, 2, 5, 3);
    H5Pset_deflate(p, 6);
  });
  expect_values(dir.file("d.h5"));
  write_dump(dir.file("d.h5"), H5T_IEEE_F32BE, Kind::F32, [](hid_t p) {
    chunks(p, 1, 16, 8);
    H5Pset_deflate(p, 1);
    H5Pset_shuffle(p);
  });
  expect_values(dir.file("d.h5"));
}

TEST(Hdf5Layouts, Float16AndBfloat16BothByteOrders) {
  TempDir dir;
  for (H5T_order_t order : {H5T_ORDER_LE, H5T_ORDER_BE}) {
    hid_t t = half(order);
    write_dump(dir.file("d.h5"), t, Kind::F16, [](hid_t p) {
      chunks(p, 1, 10, 8);
      H5Pset_shuffle(p);
      H5Pset_deflate(p, 4);
    });
    expect_values(dir.file("d.h5"));
    H5Tclose(t);
  }
  // bfloat16 bits in 16-bit integers of either sign (torch's bfloat16 viewed as int16): the
  // negative values are bits, not numbers to clamp.
  for (hid_t t : {H5T_STD_U16LE, H5T_STD_U16BE, H5T_STD_I16LE, H5T_STD_I16BE}) {
    write_dump(dir.file("d.h5"), t, Kind::BF16, [](hid_t p) {
      chunks(p, 2, 16, 8);
      H5Pset_shuffle(p);
      H5Pset_deflate(p, 1);
    });
    expect_values(dir.file("d.h5"));
  }
}

TEST(Hdf5Layouts, CompactAndFletcher32ReadByLibhdf5InAChild) {
  TempDir dir;
  write_dump(dir.file("d.h5"), H5T_IEEE_F32LE, Kind::F32, [](hid_t p) { H5Pset_layout(p, H5D_COMPACT); });
  expect_values(dir.file("d.h5"));
  write_dump(dir.file("d.h5"), H5T_IEEE_F32LE, Kind::F32, [](hid_t p) {
    chunks(p, 1, 16, 8);
    H5Pset_shuffle(p);
    H5Pset_fletcher32(p);
  });
  expect_values(dir.file("d.h5"));
  write_dump(dir.file("d.h5"), H5T_STD_I16BE, Kind::BF16, [](hid_t p) { H5Pset_layout(p, H5D_COMPACT); });
  expect_values(dir.file("d.h5"));
}

// 128 MiB of zeros deflate to ~130 KB: over 32x and 64 MiB, refused as the .npz reader refuses
// a bomb, before a 128 MiB chunk buffer is allocated.
TEST(Hdf5Layouts, DecompressionBombIsRefused) {
  TempDir dir;
  const std::string path = dir.file("bomb.h5");
  hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  string_attr(f, "format", "kvlab-kv-dump");
  int_attr(f, "format_version", 1);
  const int64_t tokens = 1 << 18, dim = 128;
  for (auto [name, v] : {std::pair<const char*, int64_t>{"num_layers", 1},
                         {"num_q_heads", 1},
                         {"num_kv_heads", 1},
                         {"head_dim", dim},
                         {"num_tokens", tokens}})
    int_attr(f, name, v);
  string_attr(f, "dtype", "float32");
  hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
  H5Pset_create_intermediate_group(lcpl, 1);
  const std::vector<float> zeros(tokens * dim, 0.0f);
  for (const char* role : {"q", "k", "v"}) {
    const hsize_t dims[3] = {1, (hsize_t)tokens, (hsize_t)dim};
    hid_t space = H5Screate_simple(3, dims, nullptr);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    chunks(dcpl, 1, tokens, dim);
    H5Pset_deflate(dcpl, 1);
    hid_t ds = H5Dcreate2(f, (std::string("/layers/0/") + role).c_str(), H5T_IEEE_F32LE, space, lcpl, dcpl,
                          H5P_DEFAULT);
    ASSERT_GE(H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, zeros.data()), 0);
    H5Dclose(ds);
    H5Pclose(dcpl);
    H5Sclose(space);
  }
  H5Pclose(lcpl);
  H5Fclose(f);
  const std::string msg =
      kvtest::message_of<std::runtime_error>([&] { kvlab::open_dump(path)->read(0, Role::K); });
  EXPECT_NE(msg.find("decompression bomb"), std::string::npos) << msg;
}

TEST(Hdf5Layouts, ExternalStorageIsRefused) {
  TempDir dir;
  const std::string raw = dir.file("values.bin");
  write_dump(dir.file("d.h5"), H5T_IEEE_F32LE, Kind::F32,
             [&](hid_t p) { H5Pset_external(p, raw.c_str(), 0, H5F_UNLIMITED); });
  const std::string msg = kvtest::message_of<std::runtime_error>([&] { kvlab::open_dump(dir.file("d.h5")); });
  EXPECT_NE(msg.find("external files"), std::string::npos) << msg;
}

}  // namespace
