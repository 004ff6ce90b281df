// eval, sensitivity and boost-sweep spread over the ranks of dist::world() (docs/SCALING.md).
// Each rank reads only the heads of its units (DumpReader::read_head: HDF5 hyperslabs), computes
// them through the library's unit function (eval_head, head_sensitivity, sweep_heads: what the
// single-process path runs), and sends the per-unit sums to rank 0, which places them by unit and
// reduces them in the single-process order: the results are the single-process bits for any
// rank count. Rank 0 gets the whole result; the other ranks get an empty one and write nothing.
#pragma once
#include "kvlab/boost_sweep.h"
#include "kvlab/dump.h"
#include "kvlab/evaluate.h"
#include "kvlab/sensitivity.h"
#include "kvlab/wire.h"

namespace kvlab::cli {

EvalResult evaluate_ranks(const DumpReader& reader, const EvalShape& shape, const EvalOptions& opt);
SensitivityResult sensitivity_ranks(const DumpReader& reader, const EvalShape& shape,
                                    const SensitivityOptions& o);
SweepResult sweep_ranks(const DumpReader& reader, const EvalShape& shape, const SweepOptions& o);

// Each rank's message starts with its view of the job: host, the dump's shape, the unit count.
// check_plan (rank 0) refuses a rank that saw another shape (a stale copy of the dump on its
// node, other options), naming the rank and its host.
void put_plan(dist::Writer& out, const EvalShape& shape, int64_t units);
void check_plan(dist::Reader& in, const EvalShape& shape, int64_t units, int rank, const std::string& study);

// Heads [first, first + n) of one layer and role, stacked (n, T, D), each read alone.
Tensor read_heads(const DumpReader& reader, int64_t layer, Role role, int64_t first, int64_t n);

}  // namespace kvlab::cli
