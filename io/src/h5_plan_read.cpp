// The kvlab-process side of h5_plan.h: plans checked against the file, values read with pread
// and decoded by kvlab (no libhdf5 call).
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "h5_chunks.h"
#include "h5_plan.h"

namespace kvlab::detail {
namespace {

// `bytes` at `addr` must lie inside the file.
void check_extent(uint64_t addr, uint64_t bytes, uint64_t file_bytes, const std::string& where) {
  uint64_t end;
  if (__builtin_add_overflow(addr, bytes, &end) || end > file_bytes)
    throw std::runtime_error(where + ": values at byte " + std::to_string(addr) + " (" +
                             std::to_string(bytes) + " bytes) lie past the end of the file (" +
                             std::to_string(file_bytes) + " bytes): truncated or corrupt file");
}

void pread_all(int fd, uint8_t* out, uint64_t bytes, uint64_t addr, const std::string& where) {
  while (bytes > 0) {
    const ssize_t n = pread(fd, out, std::min<uint64_t>(bytes, 1u << 30), (off_t)addr);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw std::runtime_error(where + ": cannot read: " + std::strerror(errno));
    if (n == 0)
      throw std::runtime_error(where + ": the file ended at byte " + std::to_string(addr) + " (truncated?)");
    out += n;
    bytes -= (uint64_t)n;
    addr += (uint64_t)n;
  }
}

void swap_bytes(uint8_t* p, uint64_t n, int elem) {
  for (uint64_t i = 0; i + elem <= n; i += elem) std::reverse(p + i, p + i + elem);
}

}  // namespace

ValuePlan get_plan(WireIn& r, uint64_t file_bytes, const std::string& where) {
  auto fail = [&](const std::string& what) { throw std::runtime_error(where + ": " + what); };
  ValuePlan p;
  const int32_t layout = r.get<int32_t>();
  if (layout < 0 || layout > (int32_t)ValuePlan::Layout::Libhdf5) fail("malformed value plan");
  p.layout = (ValuePlan::Layout)layout;
  p.why = r.get_string();
  p.elem = r.get<int32_t>();
  p.big_endian = r.get<bool>();
  p.filters = r.get_vector<int32_t>();
  for (int i = 0; i < 3; ++i) {
    p.dims[i] = r.get<int64_t>();
    p.chunk[i] = r.get<int64_t>();
  }
  p.addr = r.get<uint64_t>();
  p.chunks = r.get_vector<ChunkRef>();
  uint64_t numel = 1;
  for (int i = 0; i < 3; ++i)
    if (p.dims[i] <= 0 || __builtin_mul_overflow(numel, (uint64_t)p.dims[i], &numel))
      fail("malformed value plan");
  if (p.elem != 2 && p.elem != 4) fail("malformed value plan");
  uint64_t bytes;
  if (__builtin_mul_overflow(numel, (uint64_t)p.elem, &bytes)) fail("its byte count overflows");
  if (p.layout == ValuePlan::Layout::Contiguous) check_extent(p.addr, bytes, file_bytes, where);
  if (p.layout != ValuePlan::Layout::Chunked) return p;
  uint64_t chunk_elems = 1, n = 1;
  for (int i = 0; i < 3; ++i)
    if (p.chunk[i] <= 0 || __builtin_mul_overflow(chunk_elems, (uint64_t)p.chunk[i], &chunk_elems) ||
        __builtin_mul_overflow(n, (uint64_t)p.grid(i), &n))
      fail("malformed chunk shape");
  if (chunk_elems > (4ull << 30) / (uint64_t)p.elem) fail("chunks of more than 4 GiB (corrupt chunk shape?)");
  if (n != p.chunks.size()) fail("malformed value plan");
  for (int32_t f : p.filters)
    if (f != H5Z_FILTER_SHUFFLE && f != H5Z_FILTER_DEFLATE) fail("malformed value plan");
  uint64_t stored = 0;
  for (const ChunkRef& c : p.chunks) {
    check_extent(c.addr, c.bytes, file_bytes, where);
    stored += c.bytes;  // no overflow: each extent lies inside the file
    // Deflate inflates at most 1032-fold: a larger claim is corrupt, refused before the buffer.
    if (c.bytes == 0 || p.chunk_bytes() / 2048 > c.bytes)
      fail("a chunk of " + std::to_string(c.bytes) + " stored bytes cannot hold " +
           std::to_string(p.chunk_bytes()) + " (corrupt chunk index?)");
  }
  // The .npz rule against decompression bombs (docs/RELIABILITY.md): more than 32x the stored
  // bytes and over 64 MiB is refused before any chunk buffer is allocated. K/V deflate 1.1-2x.
  uint64_t claimed;
  if (__builtin_mul_overflow(p.chunk_bytes(), n, &claimed) ||
      (claimed > (64ull << 20) && claimed / 32 > stored))
    fail("its chunks claim " + std::to_string(claimed) + " bytes from " + std::to_string(stored) +
         " stored (over 32x and 64 MiB: a decompression bomb?)");
  return p;
}

void read_planned(int fd, const ValuePlan& p, int64_t h0, int64_t nh, void* out, const std::string& where) {
  const int64_t T = p.dims[1], D = p.dims[2], elem = p.elem;
  uint8_t* dst = static_cast<uint8_t*>(out);
  const uint64_t bytes = (uint64_t)(nh * T * D * elem);
  if (p.layout == ValuePlan::Layout::Contiguous) {
    pread_all(fd, dst, bytes, p.addr + (uint64_t)(h0 * T * D * elem), where);
  } else {
    // The chunks holding heads [h0, h0 + nh), each decoded and its part copied row by row.
    const int64_t g1 = p.grid(1), g2 = p.grid(2), first = h0 / p.chunk[0], last = (h0 + nh - 1) / p.chunk[0];
    const int64_t n = (last - first + 1) * g1 * g2;
    const uint64_t chunk_bytes = p.chunk_bytes();
    std::string error;
#pragma omp parallel for schedule(dynamic) if (n * chunk_bytes >= (4u << 20))  // small reads stay serial
    for (int64_t i = 0; i < n; ++i) {
      const int64_t c0 = first + i / (g1 * g2), c1 = i / g2 % g1, c2 = i % g2;
      const ChunkRef& c = p.chunks[(c0 * g1 + c1) * g2 + c2];
      try {
        std::vector<uint8_t> stored(c.bytes), raw(chunk_bytes);
        pread_all(fd, stored.data(), c.bytes, c.addr, where);
        decode_chunk(stored.data(), stored.size(), c.mask, p.filters, p.elem, raw.data(), chunk_bytes, where);
        const int64_t h_lo = std::max(h0, c0 * p.chunk[0]), h_hi = std::min(h0 + nh, (c0 + 1) * p.chunk[0]);
        const int64_t t_lo = c1 * p.chunk[1], t_hi = std::min(T, t_lo + p.chunk[1]);
        const int64_t d_lo = c2 * p.chunk[2], d_hi = std::min(D, d_lo + p.chunk[2]);
        const bool whole_rows =
            d_lo == 0 && d_hi == D && p.chunk[2] == D;  // (.., t, D) chunks: one copy a head
        for (int64_t h = h_lo; h < h_hi; ++h)
          for (int64_t t = t_lo; t < t_hi; t = whole_rows ? t_hi : t + 1)
            std::memcpy(dst + (((h - h0) * T + t) * D + d_lo) * elem,
                        raw.data() + (((h - c0 * p.chunk[0]) * p.chunk[1] + (t - t_lo)) * p.chunk[2]) * elem,
                        (whole_rows ? (t_hi - t) * D : d_hi - d_lo) * elem);
      } catch (const std::exception& e) {
#pragma omp critical
        error = e.what();
      }
    }
    if (!error.empty()) throw std::runtime_error(error);
  }
  if (p.big_endian != (__BYTE_ORDER__ == __ORDER_BIG_ENDIAN__)) swap_bytes(dst, bytes, p.elem);
}

}  // namespace kvlab::detail
