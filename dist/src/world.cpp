// dist::World through MPI when built with it (KVLAB_HAVE_MPI), else one process.
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include "kvlab/dist.h"
#ifdef KVLAB_HAVE_MPI
#include <mpi.h>
#endif

namespace kvlab::dist {
namespace {

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown-host";
  return buf;
}

// A launcher (mpirun, srun) started this process: the variables OpenMPI's and Slurm's PMI set.
bool launched() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK"})
    if (std::getenv(v)) return true;
  return false;
}

struct Group {
  World w;
  bool mpi = false;
  Group() {
    w.host = host_name();
#ifdef KVLAB_HAVE_MPI
    if (!launched()) return;
    int init = 0;
    MPI_Initialized(&init);
    if (!init) MPI_Init(nullptr, nullptr);
    mpi = true;
    MPI_Comm_rank(MPI_COMM_WORLD, &w.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &w.size);
#endif
  }
  ~Group() {
#ifdef KVLAB_HAVE_MPI
    int fin = 0;
    if (mpi) MPI_Finalized(&fin);
    if (mpi && !fin) MPI_Finalize();
#endif
  }
};

Group& group() {
  static Group g;
  return g;
}

}  // namespace

const World& world() { return group().w; }

bool built_with_mpi() {
#ifdef KVLAB_HAVE_MPI
  return true;
#else
  return false;
#endif
}

std::pair<int64_t, int64_t> unit_block(int64_t units, int rank, int size) {
  const int64_t base = units / size, extra = units % size;
  const int64_t first = rank * base + std::min<int64_t>(rank, extra);
  return {first, first + base + (rank < extra ? 1 : 0)};
}

std::vector<std::string> gather_to_root(const std::string& mine) {
  const World& w = world();
  if (w.size == 1) return {mine};
#ifdef KVLAB_HAVE_MPI
  if (mine.size() > (size_t)INT_MAX)
    throw std::runtime_error("dist: " + where() + " has " + std::to_string(mine.size()) +
                             " bytes of results, more than MPI_Gatherv's 2 GiB per rank");
  const int n = (int)mine.size();
  std::vector<int> sizes(w.root() ? w.size : 0), offsets;
  MPI_Gather(&n, 1, MPI_INT, sizes.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  std::string all;
  if (w.root()) {
    long long total = 0;
    for (int s : sizes) {
      offsets.push_back((int)total);
      total += s;
    }
    if (total > INT_MAX)
      throw std::runtime_error("dist: the ranks' results add up to " + std::to_string(total) +
                               " bytes, more than MPI_Gatherv's 2 GiB");
    all.resize(total);
  }
  MPI_Gatherv(mine.data(), n, MPI_BYTE, all.data(), sizes.data(), offsets.data(), MPI_BYTE, 0,
              MPI_COMM_WORLD);
  std::vector<std::string> out;
  for (int r = 0; r < (int)sizes.size(); ++r) out.push_back(all.substr(offsets[r], sizes[r]));
  return out;
#else
  return {mine};
#endif
}

std::string where() {
  const World& w = world();
  if (w.size == 1) return "";
  return "rank " + std::to_string(w.rank) + " of " + std::to_string(w.size) + " on " + w.host;
}

void abort_job(const std::string& what) {
  const std::string at = where();
  std::fprintf(stderr, "kvlab: error: %s%s%s\n", at.c_str(), at.empty() ? "" : ": ", what.c_str());
  std::fflush(stderr);
#ifdef KVLAB_HAVE_MPI
  if (group().mpi) MPI_Abort(MPI_COMM_WORLD, 1);
#endif
  std::_Exit(1);
}

}  // namespace kvlab::dist
