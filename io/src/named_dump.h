// Internal: a DumpReader over named arrays. The accepted names (docs/DUMP_FORMAT.md, "Other
// sources read as dumps"):
//   stacked     q, k, v [, k_pre_rope]                      each (L, H, T, D)
//   per layer   layers/<i>/<role>  or  layer_<i>_<role>    each (H, T, D), i = 0 .. L-1
//   metadata    token_ids (ints), rope_theta (number), rope_style, model, text (strings)
// Other names are ignored. One layout and one spelling per file.
#pragma once
#include <memory>
#include <string>

#include "array_source.h"
#include "kvlab/dump.h"

namespace kvlab::detail {

// Checks every shape, dtype and count from the arrays' headers (no data is read) and throws
// std::runtime_error naming the file and member on any mismatch. `format` ("numpy .npz", ...)
// goes into DumpInfo::source.
std::unique_ptr<DumpReader> make_named_array_dump(std::shared_ptr<const ArraySource> src,
                                                  const std::string& format);

}  // namespace kvlab::detail
