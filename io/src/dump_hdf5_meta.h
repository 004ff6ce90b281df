// Internal: what the isolated parse of an HDF5 dump hands the kvlab process: the metadata and,
// per dataset, its stored type and where its values lie (h5_plan.h).
#pragma once
#include <string>
#include <vector>

#include "h5_plan.h"
#include "kvlab/dump.h"

namespace kvlab::detail {

enum class Stored : int32_t { F16, BF16, F32 };

struct Hdf5DumpMeta {
  DumpInfo info;
  std::vector<Stored> stored;    // per (layer, role), 4 roles a layer; F32 for absent k_pre_rope
  std::vector<ValuePlan> plans;  // the same order; empty plans for absent k_pre_rope
};

// In the child (libhdf5): opens and validates the dump and returns the message for the parent.
// Throws std::runtime_error naming the file and what is wrong.
std::string parse_hdf5_dump(const std::string& path, uint64_t file_bytes);

// In the kvlab process: the message back, every plan checked against the file's size.
Hdf5DumpMeta read_hdf5_dump_meta(const std::string& message, const std::string& path, uint64_t file_bytes);

}  // namespace kvlab::detail
