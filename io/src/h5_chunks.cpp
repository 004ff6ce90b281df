#include "h5_chunks.h"

#include <zlib.h>

#include <cstring>
#include <stdexcept>

namespace kvlab::detail {
namespace {

// HDF5's shuffle: byte j of every element goes to plane j; a tail shorter than one element
// (never here: chunks hold whole elements) would stay in place.
void shuffle(const uint8_t* in, uint8_t* out, size_t bytes, int elem) {
  const size_t n = bytes / elem;
  for (int j = 0; j < elem; ++j)
    for (size_t i = 0; i < n; ++i) out[j * n + i] = in[i * elem + j];
}

void unshuffle(const uint8_t* in, uint8_t* out, size_t bytes, int elem) {
  const size_t n = bytes / elem;
  for (int j = 0; j < elem; ++j)
    for (size_t i = 0; i < n; ++i) out[i * elem + j] = in[j * n + i];
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

void decode_chunk(const uint8_t* stored, size_t stored_bytes, uint32_t mask, int elem_size, uint8_t* raw,
                  size_t raw_bytes, const std::string& what) {
  std::vector<uint8_t> inflated;
  const uint8_t* shuffled = stored;
  if (!(mask & kDeflateSkipped)) {
    inflated.resize(raw_bytes);
    uLongf n = (uLongf)raw_bytes;
    if (uncompress(inflated.data(), &n, stored, (uLong)stored_bytes) != Z_OK || n != raw_bytes)
      throw std::runtime_error(what + ": corrupt compressed chunk");
    shuffled = inflated.data();
  } else if (stored_bytes != raw_bytes) {
    throw std::runtime_error(what + ": chunk has " + std::to_string(stored_bytes) + " bytes, expected " +
                             std::to_string(raw_bytes));
  }
  if (mask & kShuffleSkipped)
    std::memcpy(raw, shuffled, raw_bytes);
  else
    unshuffle(shuffled, raw, raw_bytes, elem_size);
}

}  // namespace kvlab::detail
