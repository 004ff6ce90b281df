// The VQ codebook file (HDF5): attributes, spec against sizes, datasets.
#include <exception>

#include "fuzz_common.h"
#include "kvlab/codebook_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = kvlab::fuzz::to_file(data, size, ".h5");
  try {
    const kvlab::CodebookFile f = kvlab::read_codebook_file(path);
    (void)f.book_floats();
  } catch (const std::exception&) {}
  return 0;
}
