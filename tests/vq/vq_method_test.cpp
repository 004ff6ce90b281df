// The `vq` method family through the method registry: registration, spec round trip, the
// model check and the per-head codebooks.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "codebook_fixture.h"
#include "kvlab/codebook_file.h"
#include "kvlab/method.h"
#include "kvlab/vq.h"
#include "kvlab/vq_method.h"

namespace {

using namespace kvlab;

// The shared small codebook file, written to a temporary path.
std::string small_file() {
  std::string path = testing::TempDir();
  path.append("vq_method_cb.h5");
  write_codebook_file(path, kvtest::small_codebooks());
  return path;
}

TEST(VqMethod, RegistersOnceAndIsListed) {
  register_vq_method();
  register_vq_method();  // later calls do nothing
  const MethodFamily* f = find_method_family("vq");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(f->keys.size(), 1u);
  EXPECT_EQ(f->keys[0].name, "codebooks");
  try {
    parse_method("nope");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("vq:key=value,..."), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_method("vq:books=x.h5"), std::invalid_argument);
}

TEST(VqMethod, SpecRoundTripModelCheckAndApply) {
  register_vq_method();
  const std::string path = small_file();
  const MethodPtr m = parse_method("vq:codebooks=" + path);
  EXPECT_EQ(m->family(), "vq");
  EXPECT_EQ(m->spec(), "vq:codebooks=" + path + " (CQ-2c2b)");
  EXPECT_TRUE(*parse_method(m->spec()) == *m);  // the printed spec parses back
  EXPECT_THROW(parse_method("vq:codebooks=" + path + " (CQ-4c8b)"), std::invalid_argument);
  const Schedule s = m->schedule(10);
  EXPECT_EQ(s.key_end - s.key_begin, 10);
  EXPECT_EQ(s.value_end - s.value_begin, 10);
  EXPECT_DOUBLE_EQ(m->bits(10, 4).key, vq_bits_per_element(parse_vq_spec("CQ-2c2b"), 10, 4));
  EXPECT_NO_THROW(m->check_model({3, 3, 4}));
  EXPECT_THROW(m->check_model({3, 3, 8}), std::invalid_argument);  // another head_dim
  EXPECT_THROW(m->check_model({3, 2, 4}), std::invalid_argument);  // another KV head count

  // layer 2, head 1 decodes with that head's books, keys and values with their own role's
  Tensor x;
  x.shape = {1, 5, 4};
  for (int i = 0; i < 20; ++i) x.data.push_back(0.3f * (float)i - 2.0f);
  const Reconstruction r = m->apply(x.view(), x.view(), {2, 1});
  const CodebookFile f = read_codebook_file(path);
  for (int role = 0; role < 2; ++role) {
    VQCodebooks cb;
    cb.spec = parse_vq_spec(f.spec);
    cb.head_dim = 4;
    const int64_t n = f.book_floats(), first = ((2 - 1) * 3 + 1) * n;
    cb.data.assign(f.books[role].begin() + first, f.books[role].begin() + first + n);
    const std::vector<float> want = vq_decode(cb, vq_encode(cb, x.data.data(), 5).data(), 5);
    EXPECT_EQ(role == 0 ? r.k.data : r.v.data, want) << "role " << role;
  }
  EXPECT_NE(r.k.data, r.v.data);
  EXPECT_THROW(m->apply(x.view(), x.view(), {0, 0}), std::invalid_argument);  // layer 0 not covered
}

// vq_method_books (the GPU codebook cache's books): what apply decodes with, per layer and head.
TEST(VqMethod, BooksAreWhatApplyDecodesWith) {
  register_vq_method();
  const MethodPtr m = parse_method("vq:codebooks=" + small_file());
  EXPECT_EQ(vq_method_first_layer(*m), 1);
  Tensor x;
  x.shape = {1, 7, 4};
  for (int i = 0; i < 28; ++i) x.data.push_back(0.21f * (float)i - 2.5f);
  for (int64_t layer : {1, 2})
    for (int64_t h = 0; h < 3; ++h) {
      const VqMethodBooks b = vq_method_books(*m, layer, h, 4);
      const Reconstruction r = m->apply(x.view(), x.view(), {layer, h});
      EXPECT_EQ(r.k.data, vq_decode(b.k, vq_encode(b.k, x.data.data(), 7).data(), 7)) << layer << " " << h;
      EXPECT_EQ(r.v.data, vq_decode(b.v, vq_encode(b.v, x.data.data(), 7).data(), 7)) << layer << " " << h;
    }
  EXPECT_THROW(vq_method_books(*m, 0, 0, 4), std::invalid_argument);  // layer not covered
  EXPECT_THROW(vq_method_books(*m, 1, 3, 4), std::invalid_argument);  // no head 3
  EXPECT_THROW(vq_method_books(*m, 1, 0, 8), std::invalid_argument);  // another head_dim
  EXPECT_THROW(vq_method_books(*parse_method("kivi-2"), 1, 0, 4), std::invalid_argument);
}

}  // namespace
