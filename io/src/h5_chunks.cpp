#include "h5_chunks.h"

#include <hdf5.h>
#include <zlib.h>

#include <cstring>
#include <stdexcept>

namespace kvlab::detail {
namespace {

// HDF5's shuffle: byte j of every element goes to plane j; a tail shorter than one element
// stays in place (a shuffle applied after deflate sees one).
void shuffle(const uint8_t* in, uint8_t* out, size_t bytes, int elem) {
  const size_t n = bytes / elem;
  for (int j = 0; j < elem; ++j)
    for (size_t i = 0; i < n; ++i) out[j * n + i] = in[i * elem + j];
  std::memcpy(out + n * elem, in + n * elem, bytes - n * elem);
}

void unshuffle(const uint8_t* in, uint8_t* out, size_t bytes, int elem) {
  const size_t n = bytes / elem;
  for (int j = 0; j < elem; ++j)
    for (size_t i = 0; i < n; ++i) out[i * elem + j] = in[j * n + i];
  std::memcpy(out + n * elem, in + n * elem, bytes - n * elem);
}

}  // namespace

std::vector<uint8_t> encode_chunk(const uint8_t* raw, size_t bytes, int elem_size, uint32_t& mask) {
  std::vector<uint8_t> shuffled(bytes);
  shuffle(raw, shuffled.data(), bytes, elem_size);
  z_stream z{};
  if (deflateInit2(&z, 1, Z_DEFLATED, 15, 9, Z_HUFFMAN_ONLY) != Z_OK)
    throw std::runtime_error("zlib: deflateInit2 failed");
  std::vector<uint8_t> out(deflateBound(&z, bytes));
  z.next_in = shuffled.data();
  z.avail_in = (uInt)bytes;
  z.next_out = out.data();
  z.avail_out = (uInt)out.size();
  const int rc = deflate(&z, Z_FINISH);
  deflateEnd(&z);
  if (rc != Z_STREAM_END) throw std::runtime_error("zlib: deflate failed");
  if (z.total_out >= bytes) {  // incompressible: keep it shuffled, skip deflate
    mask = kDeflateSkipped;
    return shuffled;
  }
  mask = 0;
  out.resize(z.total_out);
  return out;
}

void decode_chunk(const uint8_t* stored, size_t stored_bytes, uint32_t mask,
                  const std::vector<int32_t>& filters, int elem_size, uint8_t* raw, size_t raw_bytes,
                  const std::string& what) {
  auto skipped = [&](size_t i) { return i < 32 && (mask >> i & 1); };
  auto size_error = [&](size_t n) {
    return std::runtime_error(what + ": chunk has " + std::to_string(n) + " bytes, expected " +
                              std::to_string(raw_bytes) + " (corrupt file?)");
  };
  size_t first = filters.size();  // the last filter to undo writes straight into raw
  for (size_t i = filters.size(); i-- > 0;)
    if (!skipped(i)) first = i;
  const uint8_t* in = stored;
  size_t n = stored_bytes;
  std::vector<uint8_t> buf[2];
  int next = 0;
  for (size_t i = filters.size(); i-- > 0;) {
    if (skipped(i)) continue;
    // Inflated data never exceeds the chunk; a shuffle keeps the size of what it undoes.
    const bool inflate = filters[i] == H5Z_FILTER_DEFLATE;
    const size_t cap = inflate ? raw_bytes : n;
    uint8_t* out = raw;
    if (i != first) {
      buf[next].resize(cap);
      out = buf[next].data();
      next ^= 1;
    } else if (cap > raw_bytes) {
      throw size_error(cap);
    }
    if (inflate) {
      uLongf m = (uLongf)raw_bytes;
      if (uncompress(out, &m, in, (uLong)n) != Z_OK)
        throw std::runtime_error(what + ": corrupt compressed chunk");
      n = m;
    } else if (filters[i] == H5Z_FILTER_SHUFFLE) {
      unshuffle(in, out, n, elem_size);
    } else {
      throw std::runtime_error(what + ": filter " + std::to_string(filters[i]) + " is not decoded by kvlab");
    }
    in = out;
  }
  if (n != raw_bytes) throw size_error(n);
  if (first == filters.size()) std::memcpy(raw, in, raw_bytes);
}

}  // namespace kvlab::detail
