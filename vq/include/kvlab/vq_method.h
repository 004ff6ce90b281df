// The KV method `vq:codebooks=CB.h5`: keys and values of every token encoded with the file's
// codebooks (both roles needed; `kvlab vq train --role kv`) and decoded.
#pragma once

namespace kvlab {

// Adds vq/'s families to the method registry (method.h): `kvquant` (k-means levels on pre-RoPE
// keys, kvquant_method.cpp) and `vq`; later calls do nothing. The kvlab main and the tests that
// use them call it once.
void register_vq_method();

}  // namespace kvlab
