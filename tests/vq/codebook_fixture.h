// A small codebook file shared by the VQ tests: CQ-2c2b books for layers 1..2, 3 KV heads,
// head_dim 4; entries differ per (role, layer, head); usage counts for the k role.
#pragma once
#include <string>
#include <vector>

#include "kvlab/codebook_file.h"

namespace kvtest {

inline kvlab::CodebookFile small_codebooks() {
  kvlab::CodebookFile f;
  f.spec = "CQ-2c2b";
  f.vec = 2;
  f.bits = 2;
  f.stages = 1;
  f.first_layer = 1;
  f.num_layers = 2;
  f.num_kv_heads = 3;
  f.head_dim = 4;
  f.tokens = 99;
  f.model = std::string("model");
  f.source = std::string("test");  // std::string: GCC 12 -Wrestrict false positive on short literals
  f.roles = {"k", "v"};
  for (int r = 0; r < 2; ++r) {
    std::vector<float> b(2 * 3 * f.book_floats());
    for (size_t i = 0; i < b.size(); ++i) b[i] = 0.5f * i + r;
    f.books.push_back(b);
  }
  f.usage = {std::vector<int64_t>(2 * 3 * 1 * 2 * 4, 7), {}};
  return f;
}

}  // namespace kvtest
