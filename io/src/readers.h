// Internal: one opener per source format; open_dump (dump_open.cpp) picks by content.
#pragma once
#include <memory>
#include <string>

#include "kvlab/dump.h"

namespace kvlab::detail {

std::unique_ptr<DumpReader> open_hdf5_dump(const std::string& path);   // dump_hdf5_read.cpp
std::unique_ptr<DumpReader> open_numpy_dump(const std::string& path);  // dump_numpy.cpp: .npz, .npy, dir
std::unique_ptr<DumpReader> open_torch_dump(const std::string& path);  // dump_torch.cpp (libtorch)

}  // namespace kvlab::detail
