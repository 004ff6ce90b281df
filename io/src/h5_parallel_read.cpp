#include "h5_parallel_read.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "h5_chunks.h"
#include "h5_util.h"

namespace kvlab::detail {
namespace {

// The chunk length in tokens when the layout is (1, ct, D) + [shuffle, deflate], else 0.
int64_t fast_layout(hid_t ds, int64_t D) {
  h5::Id dcpl(H5Dget_create_plist(ds));
  if (H5Pget_layout(dcpl.get()) != H5D_CHUNKED || H5Pget_nfilters(dcpl.get()) != 2) return 0;
  hsize_t chunk[3];
  if (H5Pget_chunk(dcpl.get(), 3, chunk) != 3 || chunk[0] != 1 || (int64_t)chunk[2] != D) return 0;
  const H5Z_filter_t want[2] = {H5Z_FILTER_SHUFFLE, H5Z_FILTER_DEFLATE};
  for (unsigned i = 0; i < 2; ++i) {
    unsigned flags = 0, cd[8];
    size_t ncd = 8;
    if (H5Pget_filter2(dcpl.get(), i, &flags, &ncd, cd, 0, nullptr, nullptr) != want[i]) return 0;
  }
  return (int64_t)chunk[1];
}

}  // namespace

bool read_chunks_parallel(hid_t ds, int64_t h0, int64_t nh, int64_t T, int64_t D, int elem, void* out,
                          const std::string& what) {
  const int64_t ct = fast_layout(ds, D);
  if (ct <= 0) return false;
  const int64_t per_head = (T + ct - 1) / ct, n = nh * per_head;
  const size_t chunk_bytes = (size_t)(ct * D * elem);
  std::vector<std::vector<uint8_t>> stored(n);
  std::vector<uint32_t> masks(n);
  for (int64_t i = 0; i < n; ++i) {
    const hsize_t offset[3] = {(hsize_t)(h0 + i / per_head), (hsize_t)((i % per_head) * ct), 0};
    hsize_t size = 0;
    if (H5Dget_chunk_storage_size(ds, offset, &size) < 0 || size == 0)
      throw std::runtime_error(what + ": chunk at head " + std::to_string(offset[0]) + ", token " +
                               std::to_string(offset[1]) + " is missing (truncated or corrupt file?)");
    stored[i].resize(size);
    if (H5Dread_chunk(ds, H5P_DEFAULT, offset, &masks[i], stored[i].data()) < 0)
      throw std::runtime_error(what + ": cannot read a chunk (truncated or corrupt file?)");
  }
  std::string error;
#pragma omp parallel for schedule(dynamic) if (n * chunk_bytes >= (4u << 20))  // small reads stay serial
  for (int64_t i = 0; i < n; ++i) {
    const int64_t h = i / per_head, t0 = (i % per_head) * ct, len = std::min(ct, T - t0);
    std::vector<uint8_t> raw(chunk_bytes);
    try {
      decode_chunk(stored[i].data(), stored[i].size(), masks[i], elem, raw.data(), chunk_bytes, what);
      std::memcpy(static_cast<uint8_t*>(out) + (h * T + t0) * D * elem, raw.data(), len * D * elem);
    } catch (const std::exception& e) {
#pragma omp critical
      error = e.what();
    }
  }
  if (!error.empty()) throw std::runtime_error(error);
  return true;
}

}  // namespace kvlab::detail
