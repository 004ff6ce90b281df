// kvlab's walk of a chunked dataset's version-1 B-tree gives libhdf5's chunk table, entry for
// entry, in the file formats that use one (object header version 1 and 2, continuation blocks,
// a userblock, a B-tree of several levels), and declines the newer chunk indexes; a dump in each
// reads back the values written.
#include <hdf5.h>

#include <cstring>
#include <filesystem>
#include <set>

#include "../../io/src/h5_btree.h"
#include "../core/test_util.h"
#include "kvlab/dump.h"

namespace {

using kvtest::TempDir;

constexpr hsize_t kDims[3] = {3, 1000, 8}, kChunk[3] = {1, 4, 8};  // 750 chunks: a B-tree of two levels

struct Variant {
  const char* name;
  H5F_libver_t low, high;
  hsize_t userblock;
  int attrs;  // written after the data: the object header grows a continuation block
  bool btree;
};

void write_file(const std::string& path, const Variant& v) {
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS), fcpl = H5Pcreate(H5P_FILE_CREATE);
  H5Pset_libver_bounds(fapl, v.low, v.high);
  if (v.userblock) H5Pset_userblock(fcpl, v.userblock);
  hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, fcpl, fapl);
  ASSERT_GE(f, 0) << v.name;
  hid_t space = H5Screate_simple(3, kDims, nullptr), dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_chunk(dcpl, 3, kChunk);
  H5Pset_shuffle(dcpl);
  H5Pset_deflate(dcpl, 1);
  hid_t ds = H5Dcreate2(f, "x", H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  ASSERT_GE(ds, 0) << v.name;
  std::vector<float> x(kDims[0] * kDims[1] * kDims[2]);
  for (size_t i = 0; i < x.size(); ++i) x[i] = (float)((i * 37) % 1013) / 16;  // sizes vary per chunk
  ASSERT_GE(H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, x.data()), 0);
  hid_t scalar = H5Screate(H5S_SCALAR), str = H5Tcopy(H5T_C_S1);
  H5Tset_size(str, 200);
  const std::string text(200, 'a');
  for (int i = 0; i < v.attrs; ++i) {
    hid_t a = H5Acreate2(ds, ("note" + std::to_string(i)).c_str(), str, scalar, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, str, text.data());
    H5Aclose(a);
  }
  H5Tclose(str);
  H5Sclose(scalar);
  H5Dclose(ds);
  H5Pclose(dcpl);
  H5Sclose(space);
  H5Fclose(f);
  H5Pclose(fcpl);
  H5Pclose(fapl);
}

TEST(H5Btree, WalkEqualsLibhdf5sChunkTable) {
  const Variant variants[] = {
      {"default format", H5F_LIBVER_EARLIEST, H5F_LIBVER_LATEST, 0, 0, true},
      {"continuation block", H5F_LIBVER_EARLIEST, H5F_LIBVER_LATEST, 0, 40, true},
      {"userblock", H5F_LIBVER_EARLIEST, H5F_LIBVER_LATEST, 512, 0, true},
      {"object header v2", H5F_LIBVER_V18, H5F_LIBVER_V18, 0, 40, true},
      {"fixed array index", H5F_LIBVER_LATEST, H5F_LIBVER_LATEST, 0, 0, false},
  };
  TempDir dir;
  for (const Variant& v : variants) {
    const std::string path = dir.file("x.h5");
    write_file(path, v);
    hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t ds = H5Dopen2(f, "x", H5P_DEFAULT);
    ASSERT_GE(ds, 0) << v.name;
    kvlab::detail::ValuePlan p;
    p.elem = 4;
    for (int i = 0; i < 3; ++i) {
      p.dims[i] = (int64_t)kDims[i];
      p.chunk[i] = (int64_t)kChunk[i];
    }
    const uint64_t n = (uint64_t)(p.grid(0) * p.grid(1) * p.grid(2));
    std::vector<kvlab::detail::ChunkRef> walked(n);
    const bool took = kvlab::detail::chunks_from_btree(ds, p, std::filesystem::file_size(path), walked);
    EXPECT_EQ(took, v.btree) << v.name;
    if (took) {
      int64_t differ = 0;
      std::set<uint64_t> sizes;
      for (uint64_t k = 0; k < n; ++k) {
        const hsize_t at[3] = {k / (uint64_t)(p.grid(1) * p.grid(2)), k / p.grid(2) % p.grid(1) * kChunk[1],
                               0};
        unsigned mask = 0;
        haddr_t addr = 0;
        hsize_t size = 0;
        ASSERT_GE(H5Dget_chunk_info_by_coord(ds, at, &mask, &addr, &size), 0);  // after the userblock
        differ += addr + v.userblock != walked[k].addr || size != walked[k].bytes || mask != walked[k].mask;
        sizes.insert(size);
      }
      EXPECT_EQ(differ, 0) << v.name;
      EXPECT_GT(sizes.size(), 1u) << v.name << ": the chunks should differ in size";
    }
    H5Dclose(ds);
    H5Fclose(f);
  }
}

}  // namespace
