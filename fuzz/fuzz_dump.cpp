// open_dump on any bytes (HDF5 dump, .npz, torch.save, .npy: the reader is picked by content),
// then every role of the first two layers, and one head. Built as dump_hdf5, dump_npz and
// dump_torch: the same code, each with its own seed corpus.
#include <algorithm>
#include <exception>

#include "fuzz_common.h"
#include "kvlab/dump.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = kvlab::fuzz::to_file(data, size, ".dump");
  try {
    const auto d = kvlab::open_dump(path);
    const kvlab::DumpInfo& info = d->info();
    for (int64_t l = 0; l < std::min<int64_t>(info.num_layers, 2); ++l) (void)d->read_layer(l);
    (void)d->read_head(info.num_layers - 1, kvlab::Role::K, info.num_kv_heads - 1);
  } catch (const std::exception&) {}
  return 0;
}
