// The ZIP reader under .npz and torch.save: directory, ZIP64 records, local headers, members
// (stored and deflate), ranges and CRC checks.
#include <exception>

#include "../io/src/zip_read.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = kvlab::fuzz::to_file(data, size, ".zip");
  try {
    const kvlab::detail::ZipArchive zip(path);
    int n = 0;
    for (const auto& e : zip.entries()) {
      if (n++ == 8) break;
      try {
        zip.verify(e);
        (void)zip.read(e);
        if (e.size > 2) (void)zip.read_range(e, 1, e.size - 2);
      } catch (const std::exception&) {}
    }
  } catch (const std::exception&) {}
  return 0;
}
