// NumPy sources read as dumps: a .npz (numpy.savez or savez_compressed) or a directory of .npy
// files, named as in named_dump.h. Lazy: opening reads the ZIP directory and the .npy headers;
// read(layer, role) reads that layer's bytes only (a deflated stacked member is inflated from
// its start up to the layer, so memory stays one layer, time grows with the layer index).
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "kvlab/npy.h"
#include "named_dump.h"
#include "numpy_source.h"
#include "readers.h"
#include "zip_read.h"

namespace kvlab::detail {

namespace fs = std::filesystem;

namespace {

[[noreturn]] void fail(const std::string& msg) { throw std::runtime_error(msg); }

// Every member's CRC is checked when the archive is opened (one streaming pass), so slices read
// later are known good and every command (info, eval, ...) accepts or rejects the same files.
class NpzSource final : public NumpySource {
 public:
  explicit NpzSource(const std::string& path) : npz_(path) {
    for (const auto& name : npz_.names()) npz_.verify(name);
  }
  const std::string& path() const override { return npz_.path(); }
  std::vector<std::string> names() const override { return npz_.names(); }
  std::string where(const std::string& name) const override { return npz_.where(name); }

 protected:
  bool contains(const std::string& name) const override { return npz_.contains(name); }
  NpyHeader header(const std::string& name) const override { return npz_.header(name); }
  std::vector<uint8_t> data(const std::string& name, uint64_t offset, uint64_t n) const override {
    return npz_.read_data(name, offset, n);
  }
  NpyArray whole(const std::string& name) const override { return npz_.read(name); }

 private:
  NpzReader npz_;
};

// DIR/q.npy, DIR/layer_0_k.npy, DIR/layers/0/k.npy: the name is the path below DIR without ".npy".
class NpyDirSource final : public NumpySource {
 public:
  explicit NpyDirSource(const std::string& dir) : dir_(dir) {
    for (const auto& e : fs::recursive_directory_iterator(dir))
      if (e.is_regular_file() && e.path().extension() == ".npy") {
        std::string rel = e.path().lexically_relative(dir).generic_string();
        names_.push_back(rel.substr(0, rel.size() - 4));
      }
  }
  const std::string& path() const override { return dir_; }
  std::vector<std::string> names() const override { return names_; }
  std::string where(const std::string& name) const override {
    std::string w = "'";  // appended, not "'" + ...: GCC 12 warns falsely (-Wrestrict) on that
    return w.append(file(name)).append("'");
  }

 protected:
  bool contains(const std::string& name) const override { return fs::is_regular_file(file(name)); }
  NpyHeader header(const std::string& name) const override {
    const std::string f = file(name);
    std::ifstream in(f, std::ios::binary);
    if (!in) fail(where(name) + ": cannot open file");
    std::vector<uint8_t> head(1 << 17);  // numpy headers are ~128 bytes
    in.read(reinterpret_cast<char*>(head.data()), (std::streamsize)head.size());
    head.resize((size_t)in.gcount());
    const NpyHeader h = parse_npy_header(head.data(), head.size(), where(name));
    const uint64_t n = h.data_bytes, size = fs::file_size(f);
    const uint64_t have = size - std::min<uint64_t>(size, h.data_offset);
    if (have < n)
      fail(where(name) + ": truncated .npy data: shape " + shape_string(h.shape) + " needs " +
           std::to_string(n) + " bytes, the file holds " + std::to_string(have));
    return h;
  }
  std::vector<uint8_t> data(const std::string& name, uint64_t offset, uint64_t n) const override {
    const NpyHeader h = header(name);
    std::ifstream in(file(name), std::ios::binary);
    std::vector<uint8_t> out(n);
    in.seekg((std::streamoff)(h.data_offset + offset));
    in.read(reinterpret_cast<char*>(out.data()), (std::streamsize)n);
    if ((uint64_t)in.gcount() != n) fail(where(name) + ": truncated .npy data");
    return out;
  }
  NpyArray whole(const std::string& name) const override { return read_npy(file(name)); }

 private:
  std::string file(const std::string& name) const { return (fs::path(dir_) / (name + ".npy")).string(); }
  std::string dir_;
  std::vector<std::string> names_;
};

bool starts_with_npy_magic(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  char m[6] = {};
  return f.read(m, 6) && std::memcmp(m, "\x93NUMPY", 6) == 0;
}

}  // namespace

std::unique_ptr<DumpReader> open_numpy_dump(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) fail("'" + path + "': no such file or directory");
  if (fs::is_directory(path, ec))
    return make_named_array_dump(std::make_shared<NpyDirSource>(path), "directory of .npy files");
  if (starts_with_npy_magic(path))
    fail("'" + path +
         "' is a single .npy array, which cannot say which part is q, k or v. Save the roles together: "
         "numpy.savez('dump.npz', q=q, k=k, v=v) with each (L, H, T, D), or q.npy, k.npy, v.npy in one "
         "directory "
         "(see docs/DUMP_FORMAT.md)");
  if (!looks_like_zip(path))
    fail("'" + path + "' is neither a .npz (ZIP) archive, a .npy file nor a directory of .npy files");
  return make_named_array_dump(std::make_shared<NpzSource>(path), "numpy .npz");
}

}  // namespace kvlab::detail
