// Output of `kvlab eval`: the text table (here), CSV and JSON (eval/, kvlab/eval_report.h).
// Named cmd_* so the experiments/ source glob compiles it; it registers no command.
#pragma once
#include <string>

#include "kvlab/atomic_file.h"  // write_file_atomically, for eval, sensitivity and boost-sweep
#include "kvlab/eval_report.h"

namespace kvlab::cli {

// One row per method, sorted by bits per element, a column per aggregated metric, then a
// footer naming the dump, the queries and the time taken.
std::string eval_table(const EvalResult& r, const ReportSource& src);

}  // namespace kvlab::cli
