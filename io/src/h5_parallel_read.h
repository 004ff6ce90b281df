// Internal: reads a (H, T, D) dataset chunked (1, ct, D) with the [shuffle, deflate] pipeline by
// fetching the raw chunks (HDF5 calls, one thread) and decoding them in parallel.
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <string>

namespace kvlab::detail {

// Heads [h0, h0 + nh) into `out` (nh * T * D elements of elem bytes). Returns false, reading
// nothing, when the dataset's chunking or filters are not that layout (use H5Dread then).
bool read_chunks_parallel(hid_t ds, int64_t h0, int64_t nh, int64_t T, int64_t D, int elem, void* out,
                          const std::string& what);

}  // namespace kvlab::detail
