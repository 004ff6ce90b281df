// Internal: where a 3-D dataset's values lie in an HDF5 file. The isolated parse (a child
// process, io/src/isolate.h) finds it with libhdf5; the kvlab process then reads the bytes with
// pread and decodes them itself, so no libhdf5 call ever touches the values of an untrusted
// file in the kvlab process (libhdf5 1.10 overflows its buffers on some corrupt files:
// docs/RELIABILITY.md). What kvlab's decoder does not take goes through libhdf5 in a child.
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>

#include "wire.h"

namespace kvlab::detail {

struct ChunkRef {
  uint64_t addr = 0, bytes = 0;  // absolute file offset and stored size
  uint32_t mask = 0;             // HDF5's per-chunk filter mask: bit i = filter i skipped
};

struct ValuePlan {
  enum class Layout : int32_t { Contiguous, Chunked, Libhdf5 };
  Layout layout = Layout::Libhdf5;
  std::string why;   // Libhdf5: what kvlab's decoder does not take
  int32_t elem = 0;  // stored bytes per element: 2 or 4
  bool big_endian = false;
  std::vector<int32_t> filters;  // pipeline order; only H5Z_FILTER_SHUFFLE and H5Z_FILTER_DEFLATE
  int64_t dims[3] = {0, 0, 0}, chunk[3] = {0, 0, 0};
  uint64_t addr = 0;             // Contiguous
  std::vector<ChunkRef> chunks;  // Chunked: every chunk, row-major over the chunk grid

  int64_t grid(int i) const { return (dims[i] + chunk[i] - 1) / chunk[i]; }
  uint64_t chunk_bytes() const { return (uint64_t)chunk[0] * chunk[1] * chunk[2] * elem; }
};

// Child side. `raw_type` is the stored element type, one kvlab decodes as bits (IEEE float32 or
// float16, 16-bit integers; LE or BE). Compact storage, other filters and edge chunks left
// unfiltered are planned as Libhdf5. External files and virtual datasets are refused (a dump
// must not make kvlab read other files). Throws naming `where`.
ValuePlan plan_values(hid_t ds, hid_t raw_type, uint64_t file_bytes, const std::string& where);

void put_plan(WireOut& w, const ValuePlan& p);
// Parent side: the plan back, checked against the file: dimensions, chunk grid, every extent
// inside `file_bytes`, stored sizes against what the chunk can hold. Throws naming `where`.
ValuePlan get_plan(WireIn& r, uint64_t file_bytes, const std::string& where);

// Heads [h0, h0 + nh) of a Contiguous or Chunked plan into `out` (nh * dims[1] * dims[2]
// elements of `elem` bytes, host byte order), read from `fd` with pread and decoded in
// parallel. Throws naming `where` on short reads, corrupt deflate streams or size mismatches.
void read_planned(int fd, const ValuePlan& p, int64_t h0, int64_t nh, void* out, const std::string& where);

}  // namespace kvlab::detail
