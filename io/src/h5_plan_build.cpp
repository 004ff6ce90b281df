// The child side of h5_plan.h: libhdf5's view of where a dataset's bytes lie.
#include <stdexcept>

#include "h5_btree.h"
#include "h5_plan.h"
#include "h5_util.h"

namespace kvlab::detail {

ValuePlan plan_values(hid_t ds, hid_t raw_type, uint64_t file_bytes, const std::string& where) {
  auto fail = [&](const std::string& what) { throw std::runtime_error(where + ": " + what); };
  ValuePlan p;
  h5::Id space(H5Dget_space(ds));
  hsize_t dims[3];
  if (H5Sget_simple_extent_ndims(space.get()) != 3 ||
      H5Sget_simple_extent_dims(space.get(), dims, nullptr) != 3)
    fail("unreadable dataspace");
  for (int i = 0; i < 3; ++i) p.dims[i] = (int64_t)dims[i];
  p.elem = (int32_t)H5Tget_size(raw_type);
  p.big_endian = H5Tget_order(raw_type) == H5T_ORDER_BE;
  h5::Id dcpl(H5Dget_create_plist(ds));
  if (!dcpl.valid()) fail("unreadable dataset creation properties");
  if (H5Pget_external_count(dcpl.get()) != 0)
    fail("its values are stored in external files, which kvlab does not read (a dump is one file)");
  const H5D_layout_t layout = H5Pget_layout(dcpl.get());
  if (layout == H5D_VIRTUAL) fail("is a virtual dataset, which kvlab does not read (a dump is one file)");
  auto libhdf5 = [&](const std::string& why) {
    p.layout = ValuePlan::Layout::Libhdf5;
    p.why = why;
    return p;
  };
  if (layout == H5D_COMPACT) return libhdf5("compact storage");
  if (layout == H5D_CONTIGUOUS) {
    const haddr_t addr = H5Dget_offset(ds);
    if (addr == HADDR_UNDEF) fail("no values are stored (truncated or corrupt file?)");
    p.layout = ValuePlan::Layout::Contiguous;
    p.addr = addr;
    return p;
  }
  if (layout != H5D_CHUNKED) fail("unknown storage layout " + std::to_string((int)layout));
  hsize_t chunk[3];
  if (H5Pget_chunk(dcpl.get(), 3, chunk) != 3) fail("unreadable chunk shape");
  for (int i = 0; i < 3; ++i) {
    if (chunk[i] == 0) fail("chunk shape has a zero dimension");
    p.chunk[i] = (int64_t)chunk[i];
  }
  unsigned opts = 0;
  if (H5Pget_chunk_opts(dcpl.get(), &opts) < 0) fail("unreadable chunk options");
  if (opts & H5D_CHUNK_DONT_FILTER_PARTIAL_CHUNKS) return libhdf5("edge chunks stored unfiltered");
  const int nf = H5Pget_nfilters(dcpl.get());
  if (nf < 0 || nf > 32) fail("unreadable filter pipeline");
  for (int i = 0; i < nf; ++i) {
    unsigned flags = 0, cd[8];
    size_t ncd = 8;
    char name[64] = "";
    const H5Z_filter_t id =
        H5Pget_filter2(dcpl.get(), (unsigned)i, &flags, &ncd, cd, sizeof name, name, nullptr);
    const bool shuffle_ok = id == H5Z_FILTER_SHUFFLE && ncd >= 1 && cd[0] == (unsigned)p.elem;
    if (id != H5Z_FILTER_DEFLATE && !shuffle_ok)
      return libhdf5("filter " + std::to_string((int)id) + " (" + std::string(name) + ")");
    p.filters.push_back((int32_t)id);
  }
  // Every chunk needs an address of at least 8 bytes in the file's chunk index: a grid larger
  // than that is corrupt, and is refused before one lookup per chunk.
  uint64_t n = 1;
  for (int i = 0; i < 3; ++i)
    if (__builtin_mul_overflow(n, (uint64_t)p.grid(i), &n) || n > file_bytes / 8)
      fail("its chunk grid has more chunks than the file can index (corrupt chunk shape?)");
  p.layout = ValuePlan::Layout::Chunked;
  p.chunks.resize(n);
  if (chunks_from_btree(ds, p, file_bytes, p.chunks)) return p;
  // Other chunk indexes, or a B-tree kvlab's walk refused: libhdf5 per chunk (quadratic in 1.10),
  // whose addresses start after the userblock (H5Dget_offset's do not).
  hsize_t userblock = 0;
  {
    h5::Id file(H5Iget_file_id(ds)), fcpl(file.valid() ? H5Fget_create_plist(file.get()) : H5I_INVALID_HID);
    if (!fcpl.valid() || H5Pget_userblock(fcpl.get(), &userblock) < 0)
      fail("unreadable file creation properties");
  }
  for (uint64_t k = 0; k < n; ++k) {
    const hsize_t at[3] = {(hsize_t)(k / (p.grid(1) * p.grid(2)) * p.chunk[0]),
                           (hsize_t)(k / p.grid(2) % p.grid(1) * p.chunk[1]),
                           (hsize_t)(k % p.grid(2) * p.chunk[2])};
    unsigned mask = 0;
    haddr_t addr = HADDR_UNDEF;
    hsize_t size = 0;
    if (H5Dget_chunk_info_by_coord(ds, at, &mask, &addr, &size) < 0 || addr == HADDR_UNDEF || size == 0)
      fail("the chunk at (" + std::to_string(at[0]) + ", " + std::to_string(at[1]) + ", " +
           std::to_string(at[2]) + ") is missing (truncated or corrupt file?)");
    p.chunks[k] = {addr + userblock, size, mask};
  }
  return p;
}

void put_plan(WireOut& w, const ValuePlan& p) {
  w.put((int32_t)p.layout);
  w.put(p.why);
  w.put(p.elem);
  w.put(p.big_endian);
  w.put(p.filters);
  for (int i = 0; i < 3; ++i) {
    w.put(p.dims[i]);
    w.put(p.chunk[i]);
  }
  w.put(p.addr);
  w.put(p.chunks);
}

}  // namespace kvlab::detail
