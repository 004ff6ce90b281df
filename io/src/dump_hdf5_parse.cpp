// The isolated parse of an HDF5 dump (run in a child process by open_hdf5_dump): libhdf5 reads
// the attributes, /token_ids and every dataset's shape, type and storage; the kvlab process gets
// them as a message (dump_hdf5_meta.h) and never calls libhdf5 on the file itself.
#include <stdexcept>

#include "dump_hdf5_layout.h"
#include "dump_hdf5_meta.h"
#include "h5_util.h"

namespace kvlab::detail {
namespace {

using h5::Id;

class Parser {
 public:
  Parser(const std::string& path, uint64_t file_bytes) : path_(path), file_bytes_(file_bytes) {}
  Hdf5DumpMeta run();

 private:
  [[noreturn]] void fail(const std::string& what) const { throw std::runtime_error(path_ + ": " + what); }
  void read_metadata();
  void check_dataset(int64_t layer, Role role);  // shape, type and storage, or a clear error

  std::string path_;
  uint64_t file_bytes_;
  Id file_;
  Hdf5DumpMeta m_;
};

Hdf5DumpMeta Parser::run() {
  h5::silence_errors();
  if (H5Fis_hdf5(path_.c_str()) <= 0) fail("not an HDF5 file");
  file_ = Id(H5Fopen(path_.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  if (!file_.valid()) fail("cannot open the HDF5 file (truncated or corrupt?)");
  read_metadata();
  DumpInfo& info = m_.info;
  info.has_k_pre_rope = h5::link_exists(file_.get(), dataset_path(0, Role::KPreRope));
  for (int64_t l = 0; l < info.num_layers; ++l)
    for (Role r : {Role::Q, Role::K, Role::V, Role::KPreRope}) {
      if (r == Role::KPreRope && !info.has_k_pre_rope) {
        if (h5::link_exists(file_.get(), dataset_path(l, r)))
          fail(dataset_path(l, r) + " exists but layer 0 has no k_pre_rope");
        m_.stored.push_back(Stored::F32);
        m_.plans.emplace_back();
        continue;
      }
      check_dataset(l, r);
    }
  return std::move(m_);
}

void Parser::read_metadata() {
  const hid_t f = file_.get();
  DumpInfo& info = m_.info;
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
  info.model = h5::read_string_attr(f, "model", path_).value_or("");
  info.num_layers = need_int("num_layers");
  info.num_q_heads = need_int("num_q_heads");
  info.num_kv_heads = need_int("num_kv_heads");
  info.head_dim = need_int("head_dim");
  info.tokens = need_int("num_tokens");
  info.rope_theta = h5::read_double_attr(f, "rope_theta", path_).value_or(10000.0);
  try {
    info.rope_style = parse_rope_style(h5::read_string_attr(f, "rope_style", path_).value_or("adjacent"));
    info.dtype = parse_capture_dtype(h5::read_string_attr(f, "dtype", path_).value_or("float32"));
  } catch (const std::invalid_argument& e) {
    fail(e.what());
  }
  info.k_after_rope = h5::read_int_attr(f, "k_after_rope", path_).value_or(1) != 0;
  if (!info.k_after_rope) fail("k_after_rope is 0: version 1 dumps store keys after RoPE");
  info.source = h5::read_string_attr(f, "source", path_).value_or("");
  info.text = h5::read_string_attr(f, "text", path_).value_or("");
  if (h5::link_exists(f, "/token_ids")) {
    Id ds(H5Dopen2(f, "/token_ids", H5P_DEFAULT));
    Id space(H5Dget_space(ds.get()));
    const hssize_t n = H5Sget_simple_extent_npoints(space.get());
    if (H5Sget_simple_extent_ndims(space.get()) != 1 || n != info.tokens)
      fail("/token_ids must have shape (" + std::to_string(info.tokens) + ",)");
    h5::check_storage(ds.get(), 4, path_ + ": /token_ids");
    info.token_ids.resize(n);
    if (H5Dread(ds.get(), H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, info.token_ids.data()) < 0)
      fail("cannot read /token_ids");
  }
  try {
    info.validate(path_);
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(e.what());
  }
}

void Parser::check_dataset(int64_t layer, Role role) {
  const std::string name = dataset_path(layer, role);
  if (!h5::link_exists(file_.get(), name)) fail("missing dataset " + name);
  Id ds(H5Dopen2(file_.get(), name.c_str(), H5P_DEFAULT));
  if (!ds.valid()) fail("cannot open dataset " + name);
  Id space(H5Dget_space(ds.get()));
  const int rank = H5Sget_simple_extent_ndims(space.get());
  std::vector<hsize_t> dims(rank > 0 ? rank : 0);
  if (rank > 0) H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  std::vector<int64_t> shape(dims.begin(), dims.end());
  if (shape != m_.info.shape(role))
    fail(name + " has shape " + shape_string(shape) + ", expected " + shape_string(m_.info.shape(role)) +
         " (heads, tokens, head_dim) from the root attributes");
  Id type(H5Dget_type(ds.get()));
  const H5T_class_t cls = H5Tget_class(type.get());
  const size_t size = H5Tget_size(type.get());
  h5::check_storage(ds.get(), size, path_ + ": " + name);
  const std::string tag = h5::read_string_attr(ds.get(), "dtype", path_ + ": " + name).value_or("");
  auto is = [&](std::initializer_list<hid_t> known) {
    for (hid_t k : known)
      if (H5Tequal(type.get(), k) > 0) return true;
    return false;
  };
  // Bit patterns kvlab decodes itself, either byte order: bfloat16 as 16-bit integers of either sign.
  if (is({H5T_IEEE_F32LE, H5T_IEEE_F32BE}))
    m_.stored.push_back(Stored::F32);
  else if (h5::is_half_type(type.get()))
    m_.stored.push_back(Stored::F16);
  else if (is({H5T_STD_U16LE, H5T_STD_U16BE, H5T_STD_I16LE, H5T_STD_I16BE}) && tag == "bfloat16")
    m_.stored.push_back(Stored::BF16);
  else
    fail(name + " has an unsupported element type (class " + std::to_string((int)cls) + ", " +
         std::to_string(size) + " bytes, dtype attribute '" + tag +
         "'); expected IEEE float32 or float16, or 16-bit integers with dtype=bfloat16");
  m_.plans.push_back(plan_values(ds.get(), type.get(), file_bytes_, path_ + ": " + name));
}

void put_info(WireOut& w, const DumpInfo& i) {
  w.put(i.model);
  for (int64_t v : {i.num_layers, i.num_q_heads, i.num_kv_heads, i.head_dim, i.tokens}) w.put(v);
  w.put(i.rope_theta);
  w.put((int32_t)i.rope_style);
  w.put(i.k_after_rope);
  w.put(i.has_k_pre_rope);
  w.put((int32_t)i.dtype);
  w.put(i.token_ids);
  w.put(i.text);
  w.put(i.source);
}

}  // namespace

std::string parse_hdf5_dump(const std::string& path, uint64_t file_bytes) {
  const Hdf5DumpMeta m = Parser(path, file_bytes).run();
  WireOut w;
  put_info(w, m.info);
  w.put(m.stored);
  for (size_t i = 0; i < m.plans.size(); ++i)
    if (i % 4 != (size_t)Role::KPreRope || m.info.has_k_pre_rope) put_plan(w, m.plans[i]);
  return std::move(w.bytes());
}

}  // namespace kvlab::detail
