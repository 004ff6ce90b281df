// The VQ codebook file (io/codebook_file.h): round trip and clear errors.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <cstdio>
#include <string>
#include <tuple>

#include "codebook_fixture.h"
#include "kvlab/codebook_file.h"

namespace {

using kvlab::CodebookFile;

using kvtest::small_codebooks;

std::string tmp(const char* name) {
  std::string s = testing::TempDir();  // append, not operator+: GCC 12 warns falsely (-Wrestrict)
  return s.append(name);
}

TEST(CodebookFile, RoundTrip) {
  const CodebookFile f = small_codebooks();
  write_codebook_file(tmp("cb.h5"), f);
  const CodebookFile g = kvlab::read_codebook_file(tmp("cb.h5"));
  EXPECT_EQ(g.spec, f.spec);
  EXPECT_EQ(g.first_layer, 1);
  EXPECT_EQ(g.num_layers, 2);
  EXPECT_EQ(g.roles, f.roles);
  EXPECT_EQ(g.books, f.books);
  EXPECT_EQ(g.usage[0], f.usage[0]);
  EXPECT_TRUE(g.usage[1].empty());
  EXPECT_EQ(g.role_index("v"), 1);
  EXPECT_EQ(g.role_index("q"), -1);
}

void expect_error(const std::string& path, const std::string& needle) {
  try {
    kvlab::read_codebook_file(path);
    FAIL() << "no error for " << path;
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(CodebookFile, ErrorsNameTheProblem) {
  expect_error(tmp("missing.h5"), "cannot open");
  {
    FILE* p = std::fopen(tmp("text.h5").c_str(), "w");
    std::fputs("hello", p);
    std::fclose(p);
  }
  expect_error(tmp("text.h5"), "not an HDF5 file");
  // An HDF5 file that is not a codebook file (no format attribute).
  H5Fclose(H5Fcreate(tmp("empty.h5").c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
  expect_error(tmp("empty.h5"), "not a kvlab VQ codebook file");
  // Books whose shape disagrees with the attributes.
  CodebookFile f = small_codebooks();
  write_codebook_file(tmp("bad.h5"), f);
  hid_t h = H5Fopen(tmp("bad.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  hid_t a = H5Aopen(h, "num_kv_heads", H5P_DEFAULT);
  const int64_t four = 4;
  H5Awrite(a, H5T_NATIVE_INT64, &four);
  H5Aclose(a);
  H5Fclose(h);
  expect_error(tmp("bad.h5"), "has shape");
}

TEST(CodebookFile, MismatchWithTheDumpIsNamed) {
  const CodebookFile f = small_codebooks();  // layers 1-2, 3 kv heads, head_dim 4
  EXPECT_NO_THROW(kvlab::check_codebooks_match(f, "cb.h5", 3, 3, 4, "d.h5"));
  for (auto [layers, heads, dim] : {std::tuple{3, 3, 8}, {3, 2, 4}, {2, 3, 4}}) {
    try {
      kvlab::check_codebooks_match(f, "cb.h5", layers, heads, dim, "d.h5");
      FAIL() << layers << " " << heads << " " << dim;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(
                    "codebook file 'cb.h5' (head_dim 4, 3 kv heads, layers 1-2) does not match dump 'd.h5'"),
                std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
