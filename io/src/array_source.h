// Internal: a file of named arrays (.npz, a directory of .npy, a torch.save dict), as the
// dump readers see it. named_dump.cpp maps the names of docs/DUMP_FORMAT.md ("Other sources
// read as dumps") onto a DumpReader; each format only says what is there and reads slices.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kvlab::detail {

struct ArrayMeta {
  std::vector<int64_t> shape;
  // "float16", "bfloat16", "float32" for the types a dump holds; else the format's own name
  // of the type ("<f8", "<i4", "Long"), quoted in the error.
  std::string dtype;
};

class ArraySource {
 public:
  virtual ~ArraySource() = default;
  virtual const std::string& path() const = 0;
  virtual std::vector<std::string> names() const = 0;
  virtual ArrayMeta meta(const std::string& name) const = 0;  // cheap: no data is read
  // `count` elements of the C-order flattened array from element `first`, as fp32 (exact
  // from float16, bfloat16, float32). Must be safe to call from several threads.
  virtual std::vector<float> read(const std::string& name, int64_t first, int64_t count) const = 0;
  virtual std::string where(const std::string& name) const = 0;  // quoted, for errors

  // Small metadata entries; std::nullopt when `name` is absent, an error naming it when it is
  // present with the wrong type or shape.
  virtual std::optional<std::vector<int64_t>> integers(const std::string& name) const = 0;
  virtual std::optional<double> number(const std::string& name) const = 0;
  virtual std::optional<std::string> text(const std::string& name) const = 0;
};

}  // namespace kvlab::detail
