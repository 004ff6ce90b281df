// Internal: NumPy files as an ArraySource. The two containers (.npz archive, directory of
// .npy files) differ only in how they find a member's header and bytes.
#pragma once
#include <string>
#include <vector>

#include "array_source.h"
#include "kvlab/npy.h"

namespace kvlab::detail {

class NumpySource : public ArraySource {
 public:
  ArrayMeta meta(const std::string& name) const override;
  std::vector<float> read(const std::string& name, int64_t first, int64_t count) const override;
  std::optional<std::vector<int64_t>> integers(const std::string& name) const override;
  std::optional<double> number(const std::string& name) const override;
  std::optional<std::string> text(const std::string& name) const override;

 protected:
  virtual bool contains(const std::string& name) const = 0;
  virtual NpyHeader header(const std::string& name) const = 0;  // checks the data is all there
  virtual std::vector<uint8_t> data(const std::string& name, uint64_t offset, uint64_t n) const = 0;
  virtual NpyArray whole(const std::string& name) const = 0;

 private:
  std::optional<NpyArray> small(const std::string& name) const;  // a metadata array, if present
};

// numpy's dtype string as the dump readers name it: "<f2" -> "float16", "<f4" -> "float32",
// "<f8" -> "float64"; others unchanged.
std::string numpy_dtype_name(const std::string& descr);

}  // namespace kvlab::detail
