// Shared by `kvlab sensitivity` and `kvlab boost-sweep`: open a dump (or a synthetic one in
// memory), make eval's layer loader, name the files written next to --out, report progress.
#pragma once
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>

#include "dump_source.h"
#include "kvlab/dump.h"
#include "kvlab/evaluate.h"
#include "kvlab/kv_text.h"

namespace kvlab::cli::calib {

using kvlab::cli::open_dump_source;

// "/a/b/stories260K.h5" -> "stories260K.h5", for chart titles.
inline std::string base_name(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

inline EvalShape shape_of(const DumpInfo& i) {
  return {i.num_layers, i.num_q_heads, i.num_kv_heads, i.head_dim, i.tokens};
}

// q and k always; v only when asked (sensitivity needs no values).
inline LayerLoader loader(const DumpReader& r, bool values) {
  return [&r, values](int64_t layer) {
    LayerQKV x;
    x.q = r.read(layer, Role::Q);
    x.k = r.read(layer, Role::K);
    if (values) x.v = r.read(layer, Role::V);
    return x;
  };
}

// A CSV cell that reads back to the same double: 17 significant digits; empty for NaN.
inline std::string csv_number(double v) {
  if (std::isnan(v)) return "";
  std::ostringstream os;
  os.precision(17);
  os << v;
  return os.str();
}

// "out/SENS.csv" + "_heatmap.svg" -> "out/SENS_heatmap.svg"
inline std::string sibling(const std::string& out, const std::string& suffix) {
  const size_t dot = out.rfind('.'), slash = out.rfind('/');
  const bool ext = dot != std::string::npos && (slash == std::string::npos || dot > slash);
  return (ext ? out.substr(0, dot) : out) + suffix;
}

inline std::function<void(const EvalProgress&)> progress(const char* name) {
  const bool tty = isatty(fileno(stderr));
  return [tty, name](const EvalProgress& p) {
    const double eta = p.elapsed_s / p.layers_done * (p.layers_total - p.layers_done);
    std::fprintf(stderr, "%s%s: layer %lld/%lld  elapsed %.1f s  ETA %.1f s%s", tty ? "\r" : "", name,
                 (long long)p.layers_done, (long long)p.layers_total, p.elapsed_s, eta, tty ? "  " : "\n");
    if (tty && p.layers_done == p.layers_total) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  };
}

}  // namespace kvlab::cli::calib
