// Internal: parsing of untrusted HDF5 (and torch.save) files in a child process. libhdf5 1.10 crashes, aborts
// or loops forever on some corrupt files (docs/RELIABILITY.md lists what it reaches); kvlab parses a file
// in a forked child with a CPU-time and memory limit. HDF5 dumps and codebook files: the child sends what
// it parsed and the kvlab process calls no libhdf5 on the file; torch.save files: only a file the child got
// through is opened in the kvlab process (the same calls on the same bytes).
#pragma once
#include <cstdint>
#include <functional>
#include <string>

namespace kvlab::detail {

// Runs `fn` in a forked child. Returns when fn returned; throws std::runtime_error with fn's own
// message when fn threw; throws naming `what` when the child crashed, used more than
// `cpu_seconds` of CPU time or `memory` bytes above the process' address space at the fork.
// KVLAB_PARSE_IN_PROCESS=1 runs fn in this process instead (to debug libhdf5 under a sanitizer).
void run_isolated(const std::function<void()>& fn, const std::string& what, double cpu_seconds,
                  uint64_t memory = 64ull << 20);

// The same, returning the bytes fn returned in the child (at most `memory` of them): how the
// child hands what it parsed to the kvlab process, which then needs no libhdf5 call on the file.
std::string run_isolated_result(const std::function<std::string()>& fn, const std::string& what,
                                double cpu_seconds, uint64_t memory = 64ull << 20);

// CPU budget of the child for a file of `bytes`: 0.5 s, plus 1 s per GiB.
double isolated_cpu_budget(uint64_t bytes);

}  // namespace kvlab::detail
