// Internal, child side of h5_plan.h: a chunked dataset's chunk table read in one pass from its
// version-1 B-tree, the chunk index of every file written in libhdf5's default format (kvlab's
// dumps, h5py's). libhdf5 1.10's public lookup, H5Dget_chunk_info_by_coord, walks the index from
// its first chunk on every call: quadratic, 31 us per chunk at 4,096 chunks per dataset (a
// 128K-token head-dim-128 dump), minutes for a million tokens.
#pragma once
#include <hdf5.h>

#include <vector>

#include "h5_plan.h"

namespace kvlab::detail {

// Fills `out` (row-major over the chunk grid of `p`; file offsets, past any userblock) from the dataset's
// object header and B-tree, read with pread through libhdf5's own file descriptor. Returns false, with `out`
// unspecified, when the dataset's index is anything else (the file's newer formats: fixed or
// extensible arrays, version-2 B-trees), when any structure is malformed or any chunk is missing
// or repeated, or when libhdf5 disagrees with the table on a checked chunk (every stored size,
// the first and last chunk's address and filter mask): the caller then asks libhdf5 per chunk.
bool chunks_from_btree(hid_t ds, const ValuePlan& p, uint64_t file_bytes, std::vector<ChunkRef>& out);

}  // namespace kvlab::detail
