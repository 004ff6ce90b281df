// The KV method `vq:codebooks=CB.h5`: keys and values of every token encoded with the file's
// codebooks (both roles needed; `kvlab vq train --role kv`) and decoded.
#pragma once

namespace kvlab {

// Adds the `vq` family to the method registry (method.h); later calls do nothing. The kvlab
// main and the tests that use the method call it once.
void register_vq_method();

}  // namespace kvlab
