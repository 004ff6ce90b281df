// .npz through NpzReader: member names, .npy headers inside members, partial and whole reads.
#include <exception>

#include "fuzz_common.h"
#include "kvlab/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = kvlab::fuzz::to_file(data, size, ".npz");
  try {
    const kvlab::NpzReader npz(path);
    for (const auto& name : npz.names()) {
      try {
        const kvlab::NpyHeader h = npz.header(name);
        (void)npz.read_data(name, 0, h.data_bytes / 2);
        (void)npz.read(name);
      } catch (const std::exception&) {}
    }
  } catch (const std::exception&) {}
  return 0;
}
