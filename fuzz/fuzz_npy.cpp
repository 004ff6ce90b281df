// .npy bytes in memory: header dict, shape, dtype, data length.
#include <exception>

#include "kvlab/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const kvlab::NpyArray a = kvlab::parse_npy(data, size, "'fuzz.npy'");
    (void)a.numel();
  } catch (const std::exception&) {}
  return 0;
}
