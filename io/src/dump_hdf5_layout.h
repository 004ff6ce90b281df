// Internal: names shared by the HDF5 dump reader and writer (docs/DUMP_FORMAT.md).
#pragma once
#include <cstdint>
#include <string>

#include "kvlab/dump.h"

namespace kvlab::detail {

inline constexpr const char* kDumpFormatName = "kvlab-kv-dump";
inline constexpr int64_t kDumpFormatVersion = 1;

inline std::string dataset_path(int64_t layer, Role role) {
  return "/layers/" + std::to_string(layer) + "/" + to_string(role);
}

}  // namespace kvlab::detail
