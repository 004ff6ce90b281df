// A llama2.c version-0 checkpoint: header bounds, sizes implied by the header, block offsets.
#include <exception>

#include "fuzz_common.h"
#include "kvlab/llama2c.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = kvlab::fuzz::to_file(data, size, ".bin");
  try {
    const kvlab::Llama2cModel m = kvlab::load_llama2c(path);
    (void)m.weights.size();
  } catch (const std::exception&) {}
  return 0;
}
