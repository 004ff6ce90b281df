// Internal: the byte-shuffle + deflate chunk codec of HDF5's filter pipeline, done by kvlab so
// chunks compress and decompress in parallel (libhdf5 runs its filters on one thread) and with
// zlib's Huffman-only strategy: standard deflate streams that any HDF5 reader inflates, at
// ~4x the speed of level 1 and a slightly better ratio on fp16 data (the shuffled exponent
// bytes compress; the low mantissa bytes do not, whatever the strategy).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kvlab::detail {

// Filter-mask bit as HDF5 stores it per chunk: bit i set = filter i of the pipeline skipped
// (here deflate, the second of [shuffle, deflate]).
inline constexpr uint32_t kDeflateSkipped = 1u << 1;

// Shuffles and deflates one chunk; when deflate does not shrink it the chunk is stored
// shuffled only and `mask` says so (HDF5's optional-filter convention).
std::vector<uint8_t> encode_chunk(const uint8_t* raw, size_t bytes, int elem_size, uint32_t& mask);

// Undoes a pipeline of H5Z_FILTER_SHUFFLE and H5Z_FILTER_DEFLATE `filters` (in the order they
// were applied; `mask` bit i = filter i skipped for this chunk), the inverse of encode_chunk for
// [shuffle, deflate]. Nothing grows past `raw_bytes`; throws std::runtime_error with `what` on
// a corrupt stream or a size mismatch.
void decode_chunk(const uint8_t* stored, size_t stored_bytes, uint32_t mask,
                  const std::vector<int32_t>& filters, int elem_size, uint8_t* raw, size_t raw_bytes,
                  const std::string& what);

}  // namespace kvlab::detail
