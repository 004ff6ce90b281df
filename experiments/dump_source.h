// The DUMP argument of eval, sensitivity and boost-sweep: a file open_dump reads, or
// `synthetic:PRESET[:tokens=N,layers=N,seed=N]`, the generator as a reader (no file written).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvlab/dump.h"
#include "kvlab/kv_text.h"
#include "kvlab/path_checks.h"
#include "kvlab/synthetic_dump.h"

namespace kvlab::cli {

// The DUMP among a command's inputs (check_outputs_not_inputs): none for a synthetic source.
inline std::vector<NamedPath> dump_inputs(const std::string& path, const std::string& option = "DUMP") {
  if (path.rfind("synthetic:", 0) == 0) return {};
  return {{option, path}};
}

inline std::unique_ptr<DumpReader> open_dump_source(const std::string& path) {
  if (path.rfind("synthetic:", 0) != 0) return open_dump(path);
  const std::string rest = path.substr(std::string("synthetic:").size());
  const size_t colon = rest.find(':');
  SyntheticDumpParams p = synthetic_preset(rest.substr(0, colon));
  std::string where = "synthetic dump '";  // appended, not `"..." + path`: GCC 12 -Wrestrict false positive
  where += path;
  where += "'";
  if (colon != std::string::npos)
    for (const auto& [key, v] : text::split_pairs(rest.substr(colon + 1), where)) {
      text::choose(key, "synthetic dump key", {"tokens", "layers", "seed"});
      const int64_t n = text::parse_count(v, key);
      if (key == "tokens")
        p.tokens = n;
      else if (key == "layers")
        p.layers = n;
      else
        p.seed = (uint64_t)n;
    }
  return std::make_unique<SyntheticDump>(p);
}

}  // namespace kvlab::cli
