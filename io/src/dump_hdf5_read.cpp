// The HDF5 dump reader: metadata and every dataset's shape and type are checked when the file
// is opened; values are read lazily, one layer and role (or one head) at a time.
#include <sys/stat.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "convert.h"
#include "dump_hdf5_layout.h"
#include "h5_parallel_read.h"
#include "h5_util.h"
#include "isolate.h"
#include "readers.h"

namespace kvlab::detail {
namespace {

using h5::Id;

enum class Stored { F16, BF16, F32 };

class Hdf5Dump final : public DumpReader {
 public:
  explicit Hdf5Dump(const std::string& path);
  ~Hdf5Dump() override {
    std::lock_guard<std::recursive_mutex> g(h5::library_lock());
    file_.reset();
  }
  const DumpInfo& info() const override { return info_; }
  const std::string& path() const override { return path_; }
  Tensor read(int64_t layer, Role role) const override { return load(layer, role, -1); }
  Tensor read_head(int64_t layer, Role role, int64_t head) const override {
    check_request(layer, role, head);
    return load(layer, role, head);
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { throw std::runtime_error(path_ + ": " + what); }
  void read_metadata();
  Stored check_dataset(int64_t layer, Role role) const;  // shape and type, or a clear error
  Tensor load(int64_t layer, Role role, int64_t head) const;

  std::string path_;
  DumpInfo info_;
  Id file_;
  std::vector<Stored> stored_;  // per (layer, role)
};

Hdf5Dump::Hdf5Dump(const std::string& path) : path_(path) {
  std::lock_guard<std::recursive_mutex> g(h5::library_lock());
  h5::silence_errors();
  struct stat st;
  if (stat(path.c_str(), &st) != 0) fail("no such file");
  if (H5Fis_hdf5(path.c_str()) <= 0) fail("not an HDF5 file");
  file_ = Id(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  if (!file_.valid()) fail("cannot open the HDF5 file (truncated or corrupt?)");
  read_metadata();
  info_.has_k_pre_rope = h5::link_exists(file_.get(), dataset_path(0, Role::KPreRope));
  for (int64_t l = 0; l < info_.num_layers; ++l)
    for (Role r : {Role::Q, Role::K, Role::V, Role::KPreRope}) {
      if (r == Role::KPreRope && !info_.has_k_pre_rope) {
        if (h5::link_exists(file_.get(), dataset_path(l, r)))
          fail(dataset_path(l, r) + " exists but layer 0 has no k_pre_rope");
        stored_.push_back(Stored::F32);
        continue;
      }
      stored_.push_back(check_dataset(l, r));
    }
}

void Hdf5Dump::read_metadata() {
  const hid_t f = file_.get();
  auto need_int = [&](const char* name) {
    auto v = h5::read_int_attr(f, name, path_);
    if (!v) fail("missing root attribute '" + std::string(name) + "'");
    return *v;
  };
  auto format = h5::read_string_attr(f, "format", path_);
  if (!format) fail("missing root attribute 'format' (not a kvlab dump?)");
  if (*format != kDumpFormatName) fail("format is '" + *format + "', expected '" + kDumpFormatName + "'");
  const int64_t version = need_int("format_version");
  if (version != kDumpFormatVersion)
    fail("format_version " + std::to_string(version) + " is not supported (this kvlab reads version " +
         std::to_string(kDumpFormatVersion) + ")");
  info_.model = h5::read_string_attr(f, "model", path_).value_or("");
  info_.num_layers = need_int("num_layers");
  info_.num_q_heads = need_int("num_q_heads");
  info_.num_kv_heads = need_int("num_kv_heads");
  info_.head_dim = need_int("head_dim");
  info_.tokens = need_int("num_tokens");
  info_.rope_theta = h5::read_double_attr(f, "rope_theta", path_).value_or(10000.0);
  try {
    info_.rope_style = parse_rope_style(h5::read_string_attr(f, "rope_style", path_).value_or("adjacent"));
    info_.dtype = parse_capture_dtype(h5::read_string_attr(f, "dtype", path_).value_or("float32"));
  } catch (const std::invalid_argument& e) {
    fail(e.what());
  }
  info_.k_after_rope = h5::read_int_attr(f, "k_after_rope", path_).value_or(1) != 0;
  if (!info_.k_after_rope) fail("k_after_rope is 0: version 1 dumps store keys after RoPE");
  info_.source = h5::read_string_attr(f, "source", path_).value_or("");
  info_.text = h5::read_string_attr(f, "text", path_).value_or("");
  if (h5::link_exists(f, "/token_ids")) {
    Id ds(H5Dopen2(f, "/token_ids", H5P_DEFAULT));
    Id space(H5Dget_space(ds.get()));
    const hssize_t n = H5Sget_simple_extent_npoints(space.get());
    if (H5Sget_simple_extent_ndims(space.get()) != 1 || n != info_.tokens)
      fail("/token_ids must have shape (" + std::to_string(info_.tokens) + ",)");
    h5::check_storage(ds.get(), 4, path_ + ": /token_ids");
    info_.token_ids.resize(n);
    if (H5Dread(ds.get(), H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, info_.token_ids.data()) < 0)
      fail("cannot read /token_ids");
  }
  try {
    info_.validate(path_);
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(e.what());
  }
}

Stored Hdf5Dump::check_dataset(int64_t layer, Role role) const {
  const std::string name = dataset_path(layer, role);
  if (!h5::link_exists(file_.get(), name)) fail("missing dataset " + name);
  Id ds(H5Dopen2(file_.get(), name.c_str(), H5P_DEFAULT));
  if (!ds.valid()) fail("cannot open dataset " + name);
  Id space(H5Dget_space(ds.get()));
  const int rank = H5Sget_simple_extent_ndims(space.get());
  std::vector<hsize_t> dims(rank > 0 ? rank : 0);
  if (rank > 0) H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  std::vector<int64_t> shape(dims.begin(), dims.end());
  if (shape != info_.shape(role))
    fail(name + " has shape " + shape_string(shape) + ", expected " + shape_string(info_.shape(role)) +
         " (heads, tokens, head_dim) from the root attributes");
  Id type(H5Dget_type(ds.get()));
  const H5T_class_t cls = H5Tget_class(type.get());
  const size_t size = H5Tget_size(type.get());
  h5::check_storage(ds.get(), size, path_ + ": " + name);
  const std::string tag = h5::read_string_attr(ds.get(), "dtype", path_ + ": " + name).value_or("");
  if (cls == H5T_FLOAT && size == 4) return Stored::F32;
  if (h5::is_half_type(type.get())) return Stored::F16;
  if (cls == H5T_INTEGER && size == 2 && tag == "bfloat16") return Stored::BF16;
  fail(name + " has an unsupported element type (class " + std::to_string((int)cls) + ", " +
       std::to_string(size) + " bytes, dtype attribute '" + tag +
       "'); expected float32, float16, or uint16 with dtype=bfloat16");
}

Tensor Hdf5Dump::load(int64_t layer, Role role, int64_t head) const {
  std::lock_guard<std::recursive_mutex> g(h5::library_lock());
  if (head < 0) check_request(layer, role, 0);
  const std::string name = dataset_path(layer, role);
  const Stored st = stored_[layer * 4 + (int)role];
  Id ds(H5Dopen2(file_.get(), name.c_str(), H5P_DEFAULT));
  const int64_t T = info_.tokens, D = info_.head_dim;
  const int64_t heads = head < 0 ? info_.heads(role) : 1;
  Tensor out;
  out.shape = {heads, T, D};
  out.data.resize(heads * T * D);

  // Raw bytes as stored, then to fp32: the parallel chunk decoder when the layout allows.
  const int elem = st == Stored::F32 ? 4 : 2;
  std::vector<uint16_t> bits(st == Stored::F32 ? 0 : out.data.size());
  void* raw = st == Stored::F32 ? (void*)out.data.data() : (void*)bits.data();
  Id mem_type(H5Tcopy(st == Stored::F32 ? H5T_NATIVE_FLOAT : H5T_NATIVE_UINT16));
  if (st == Stored::F16) mem_type = h5::half_type();
  herr_t rc = 0;
  if (!read_chunks_parallel(ds.get(), std::max<int64_t>(head, 0), heads, T, D, elem, raw,
                            path_ + ": " + name)) {
    Id file_space(H5Dget_space(ds.get()));
    const hsize_t count[3] = {(hsize_t)heads, (hsize_t)T, (hsize_t)D};
    if (head >= 0) {
      const hsize_t start[3] = {(hsize_t)head, 0, 0};
      H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start, nullptr, count, nullptr);
    }
    Id mem_space(H5Screate_simple(3, count, nullptr));
    rc = H5Dread(ds.get(), mem_type.get(), mem_space.get(), file_space.get(), H5P_DEFAULT, raw);
  }
  if (st == Stored::F16)
    half_to_float_n(bits.data(), out.data.data(), (int64_t)bits.size());
  else if (st == Stored::BF16)
    for (size_t i = 0; i < bits.size(); ++i) out.data[i] = bf16_to_float(bits[i]);
  if (rc < 0) fail("cannot read " + name + " (truncated or corrupt file?)");
  check_finite(out.view(), path_ + ": " + name + (head >= 0 ? " head " + std::to_string(head) : ""));
  return out;
}

}  // namespace

std::unique_ptr<DumpReader> open_hdf5_dump(const std::string& path) {
  struct stat st;
  const uint64_t bytes = stat(path.c_str(), &st) == 0 ? (uint64_t)st.st_size : 0;
  run_isolated([&] { Hdf5Dump probe(path); }, path, isolated_cpu_budget(bytes));
  return std::make_unique<Hdf5Dump>(path);
}

}  // namespace kvlab::detail
