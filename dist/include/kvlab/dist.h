// The process group a study is spread over (docs/SCALING.md). Started by mpirun or srun and built
// with MPI: MPI_COMM_WORLD. Otherwise one process (rank 0 of 1), so every caller has one code path.
//
// The studies split their work into units in a fixed order, give each rank a contiguous block of
// them (unit_block), compute each unit through the same function the single-process path calls,
// and send the per-unit results to rank 0 (gather_to_root), which places them by unit and reduces
// them in the single-process order. Only rank 0 writes files.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace kvlab::dist {

struct World {
  int rank = 0, size = 1;
  std::string host;  // this rank's host name, for messages
  bool root() const { return rank == 0; }
};

// The group, set up on first use: MPI_Init when the process was started by mpirun/srun
// (OMPI_COMM_WORLD_SIZE, PMIX_RANK or PMI_RANK in the environment) and kvlab has MPI; MPI is
// finalized at exit. Without a launcher, one process even in an MPI build.
const World& world();

// True when kvlab was built with MPI (KVLAB_WITH_MPI and MPI found).
bool built_with_mpi();

// Units [first, last) of `rank` among `size` ranks: contiguous blocks in unit order whose sizes
// differ by at most one (the first units % size ranks get one more). Ranks past the unit count get
// an empty block and stay idle.
std::pair<int64_t, int64_t> unit_block(int64_t units, int rank, int size);

// Every rank's bytes on rank 0, in rank order; the other ranks get an empty list. Collective.
std::vector<std::string> gather_to_root(const std::string& mine);

// "rank R of N on HOST" (empty for a single process): where a message came from.
std::string where();

// Ends the whole job with exit status 1 after printing "kvlab: error: rank R of N on HOST: what"
// (MPI_Abort: every rank stops, nothing more is written). Single process: prints and exits 1.
[[noreturn]] void abort_job(const std::string& what);

}  // namespace kvlab::dist
