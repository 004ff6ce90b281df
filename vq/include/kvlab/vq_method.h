// The KV method `vq:codebooks=CB.h5`: keys and values of every token encoded with the file's
// codebooks (both roles needed; `kvlab vq train --role kv`) and decoded.
#pragma once
#include <cstdint>

#include "kvlab/method.h"
#include "kvlab/vq.h"

namespace kvlab {

// Adds vq/'s families to the method registry (method.h): `kvquant` (k-means levels on pre-RoPE
// keys, kvquant_method.cpp) and `vq`; later calls do nothing. The kvlab main and the tests that
// use them call it once.
void register_vq_method();

// The key and value codebooks a `vq` method applies to KV head kv_head of `layer` (what its
// apply() decodes with); throws std::invalid_argument for another family, a layer or head the
// file lacks, or another head_dim.
struct VqMethodBooks {
  VQCodebooks k, v;
};
VqMethodBooks vq_method_books(const Method& m, int64_t layer, int64_t kv_head, int64_t head_dim);
// The first layer a `vq` method's codebook file covers.
int64_t vq_method_first_layer(const Method& m);

}  // namespace kvlab
