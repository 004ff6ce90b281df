// The one exception type of the bindings' own: a file that does not exist (kvlab.MissingFileError).
#pragma once
#include <stdexcept>

namespace kvlab::bind {

struct MissingFile : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace kvlab::bind
