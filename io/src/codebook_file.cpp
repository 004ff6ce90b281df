#include "kvlab/codebook_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <stdexcept>

#include "h5_util.h"
#include "isolate.h"
#include "kvlab/temp_file.h"
#include "wire.h"

namespace kvlab {

using h5::Id;

int64_t CodebookFile::role_index(const std::string& role) const {
  for (size_t i = 0; i < roles.size(); ++i)
    if (roles[i] == role) return i;
  return -1;
}

void check_codebooks_match(const CodebookFile& f, const std::string& file, int64_t dump_layers,
                           int64_t dump_kv_heads, int64_t dump_head_dim, const std::string& dump) {
  if (f.head_dim == dump_head_dim && f.num_kv_heads == dump_kv_heads &&
      f.first_layer + f.num_layers <= dump_layers)
    return;
  throw std::invalid_argument(
      "codebook file '" + file + "' (head_dim " + std::to_string(f.head_dim) + ", " +
      std::to_string(f.num_kv_heads) + " kv heads, layers " + std::to_string(f.first_layer) + "-" +
      std::to_string(f.first_layer + f.num_layers - 1) + ") does not match " +
      (dump.empty() ? std::string("the dump") : "dump '" + dump + "'") + " (head_dim " +
      std::to_string(dump_head_dim) + ", " + std::to_string(dump_kv_heads) + " kv heads, " +
      std::to_string(dump_layers) + " layers)");
}

namespace {

constexpr const char* kFormat = "kvlab-vq-codebooks";

void write_dataset(hid_t file, const std::string& name, hid_t mem_type, hid_t file_type,
                   const std::vector<int64_t>& shape, const void* data, const std::string& where) {
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  Id space(H5Screate_simple(dims.size(), dims.data(), nullptr));
  Id lcpl(H5Pcreate(H5P_LINK_CREATE));
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  // No modification times in the object headers: the same codebooks give the same file bytes
  // (a vq train spread over MPI ranks is compared with one process byte for byte).
  Id dcpl(H5Pcreate(H5P_DATASET_CREATE));
  H5Pset_obj_track_times(dcpl.get(), 0);
  Id ds(H5Dcreate2(file, name.c_str(), file_type, space.get(), lcpl.get(), dcpl.get(), H5P_DEFAULT));
  if (!ds.valid() || H5Dwrite(ds.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
    throw std::runtime_error(where + ": cannot write dataset " + name);
}

template <class T>
std::vector<T> read_dataset(hid_t file, const std::string& name, hid_t mem_type,
                            const std::vector<int64_t>& want, const std::string& where) {
  if (!h5::link_exists(file, name)) throw std::runtime_error(where + ": dataset /" + name + " is missing");
  Id ds(H5Dopen2(file, name.c_str(), H5P_DEFAULT));
  Id space(H5Dget_space(ds.get()));
  const int rank = H5Sget_simple_extent_ndims(space.get());
  std::vector<hsize_t> dims(rank > 0 ? rank : 0);
  if (rank > 0) H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  if (std::vector<int64_t>(dims.begin(), dims.end()) != want) {
    std::string w, g;
    for (auto v : want) w += std::to_string(v) + ",";
    for (auto v : dims) g += std::to_string(v) + ",";
    throw std::runtime_error(where + ": dataset /" + name + " has shape (" + g +
                             ") but the attributes say (" + w + ")");
  }
  h5::check_storage(ds.get(), sizeof(T), where + ": dataset /" + name);  // before the allocation
  int64_t n = 1;
  for (auto v : want) n *= v;
  std::vector<T> out(n);
  if (H5Dread(ds.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()) < 0)
    throw std::runtime_error(where + ": cannot read dataset /" + name);
  return out;
}

}  // namespace

void write_codebook_file(const std::string& path, const CodebookFile& f) {
  std::lock_guard<std::recursive_mutex> g(h5::library_lock());
  h5::silence_errors();
  const std::string where = "'" + path + "'";
  TempFile tmp(path);
  {
    Id file(H5Fcreate(tmp.tmp().c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
    if (!file.valid()) throw std::runtime_error("cannot create '" + tmp.tmp() + "' (HDF5)");
    const hid_t r = file.get();
    h5::write_attr(r, "format", std::string(kFormat));
    h5::write_attr(r, "version", (int64_t)1);
    h5::write_attr(r, "spec", f.spec);
    h5::write_attr(r, "vec", f.vec);
    h5::write_attr(r, "bits", f.bits);
    h5::write_attr(r, "stages", f.stages);
    h5::write_attr(r, "first_layer", f.first_layer);
    h5::write_attr(r, "num_layers", f.num_layers);
    h5::write_attr(r, "num_kv_heads", f.num_kv_heads);
    h5::write_attr(r, "head_dim", f.head_dim);
    h5::write_attr(r, "tokens", f.tokens);
    h5::write_attr(r, "model", f.model);
    h5::write_attr(r, "source", f.source);
    h5::write_attr(r, "reordered", (int64_t)f.reordered);
    std::string roles;
    for (const auto& s : f.roles) roles += (roles.empty() ? "" : ",") + s;
    h5::write_attr(r, "roles", roles);
    const int64_t K = (int64_t)1 << f.bits;
    for (size_t i = 0; i < f.roles.size(); ++i) {
      write_dataset(r, f.roles[i] + "/codebooks", H5T_NATIVE_FLOAT, H5T_IEEE_F32LE,
                    {f.num_layers, f.num_kv_heads, f.stages, f.groups(), K, f.vec}, f.books[i].data(), where);
      if (i < f.usage.size() && !f.usage[i].empty())
        write_dataset(r, f.roles[i] + "/usage", H5T_NATIVE_INT64, H5T_STD_I64LE,
                      {f.num_layers, f.num_kv_heads, f.stages, f.groups(), K}, f.usage[i].data(), where);
    }
    errno = 0;
    if (H5Fclose(file.release()) < 0) throw_os_error("cannot finish writing '" + tmp.tmp() + "'");
  }
  tmp.commit();
}

std::string vq_spec_text(int64_t vec, int64_t bits, int64_t stages) {
  if (stages == 1) return "CQ-" + std::to_string(vec) + "c" + std::to_string(bits) + "b";
  return "VQ<" + std::to_string(vec) + "," + std::to_string(bits) + "," + std::to_string(stages) + ">";
}

namespace {

CodebookFile read_unisolated(const std::string& path, const std::string& where) {
  std::lock_guard<std::recursive_mutex> g(h5::library_lock());
  h5::silence_errors();
  if (H5Fis_hdf5(path.c_str()) <= 0) throw std::runtime_error(where + ": not an HDF5 file");
  Id file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  if (!file.valid()) throw std::runtime_error(where + ": cannot open");
  const hid_t r = file.get();
  if (h5::read_string_attr(r, "format", where).value_or("") != kFormat)
    throw std::runtime_error(where + ": not a kvlab VQ codebook file (attribute format != " + kFormat + ")");
  auto need = [&](const char* name) {
    auto v = h5::read_int_attr(r, name, where);
    if (!v) throw std::runtime_error(where + ": attribute " + name + " is missing");
    return *v;
  };
  CodebookFile f;
  f.spec = h5::read_string_attr(r, "spec", where).value_or("");
  f.vec = need("vec");
  f.bits = need("bits");
  f.stages = need("stages");
  f.num_layers = need("num_layers");
  f.num_kv_heads = need("num_kv_heads");
  f.head_dim = need("head_dim");
  f.tokens = need("tokens");
  f.first_layer = need("first_layer");
  f.reordered = need("reordered") != 0;
  f.model = h5::read_string_attr(r, "model", where).value_or("");
  f.source = h5::read_string_attr(r, "source", where).value_or("");
  if (f.vec < 1 || f.vec > 4096 || f.bits < 1 || f.bits > 8 || f.stages < 1 || f.stages > 8 ||
      f.head_dim < 1 || f.head_dim % f.vec != 0 || f.num_layers < 1 || f.num_kv_heads < 1 ||
      f.first_layer < 0)
    throw std::runtime_error(where + ": inconsistent attributes (vec " + std::to_string(f.vec) + ", bits " +
                             std::to_string(f.bits) + ", stages " + std::to_string(f.stages) + ", head_dim " +
                             std::to_string(f.head_dim) + ")");
  // The spec is what vq/ parses; the attributes size the arrays: they must agree.
  if (f.spec != vq_spec_text(f.vec, f.bits, f.stages))
    throw std::runtime_error(where + ": spec '" + f.spec + "' disagrees with the attributes vec " +
                             std::to_string(f.vec) + ", bits " + std::to_string(f.bits) + ", stages " +
                             std::to_string(f.stages) + " (" + vq_spec_text(f.vec, f.bits, f.stages) + ")");
  const std::string roles = h5::read_string_attr(r, "roles", where).value_or("");
  for (size_t a = 0; a < roles.size();) {
    size_t b = roles.find(',', a);
    if (b == std::string::npos) b = roles.size();
    f.roles.push_back(roles.substr(a, b - a));
    a = b + 1;
  }
  if (f.roles.empty()) throw std::runtime_error(where + ": attribute roles is empty");
  for (size_t i = 0; i < f.roles.size(); ++i)
    if ((f.roles[i] != "k" && f.roles[i] != "v") || f.role_index(f.roles[i]) != (int64_t)i)
      throw std::runtime_error(where + ": attribute roles '" + roles + "' must be k, v or k,v");
  const int64_t K = (int64_t)1 << f.bits;
  for (const auto& role : f.roles) {
    f.books.push_back(read_dataset<float>(r, role + "/codebooks", H5T_NATIVE_FLOAT,
                                          {f.num_layers, f.num_kv_heads, f.stages, f.groups(), K, f.vec},
                                          where));
    f.usage.push_back(h5::link_exists(r, role + "/usage")
                          ? read_dataset<int64_t>(r, role + "/usage", H5T_NATIVE_INT64,
                                                  {f.num_layers, f.num_kv_heads, f.stages, f.groups(), K},
                                                  where)
                          : std::vector<int64_t>{});
  }
  return f;
}

// What the child parsed, as the message for the parent (io/src/wire.h).
std::string to_message(const CodebookFile& f) {
  detail::WireOut w;
  for (const std::string* t : {&f.spec, &f.model, &f.source}) w.put(*t);
  for (int64_t v :
       {f.vec, f.bits, f.stages, f.first_layer, f.num_layers, f.num_kv_heads, f.head_dim, f.tokens})
    w.put(v);
  w.put(f.reordered);
  w.put<uint64_t>(f.roles.size());
  for (size_t i = 0; i < f.roles.size(); ++i) {
    w.put(f.roles[i]);
    w.put(f.books[i]);
    w.put(f.usage[i]);
  }
  return std::move(w.bytes());
}

CodebookFile from_message(const std::string& m, const std::string& where) {
  detail::WireIn r(m, where);
  CodebookFile f;
  for (std::string* t : {&f.spec, &f.model, &f.source}) *t = r.get_string();
  for (int64_t* v :
       {&f.vec, &f.bits, &f.stages, &f.first_layer, &f.num_layers, &f.num_kv_heads, &f.head_dim, &f.tokens})
    *v = r.get<int64_t>();
  f.reordered = r.get<bool>();
  const uint64_t roles = r.get<uint64_t>();
  if (roles > 2) throw std::runtime_error(where + ": the parsing process sent a malformed result");
  for (uint64_t i = 0; i < roles; ++i) {
    f.roles.push_back(r.get_string());
    f.books.push_back(r.get_vector<float>());
    f.usage.push_back(r.get_vector<int64_t>());
  }
  r.finish();
  // The child checked the shapes; a short array here would index past its end in vq/.
  const uint64_t floats = (uint64_t)f.num_layers * f.num_kv_heads * f.book_floats();
  for (size_t i = 0; i < f.roles.size(); ++i)
    if (f.books[i].size() != floats || (!f.usage[i].empty() && f.usage[i].size() * f.vec != floats))
      throw std::runtime_error(where + ": the parsing process sent a malformed result");
  return f;
}

}  // namespace

CodebookFile read_codebook_file(const std::string& path) {
  const std::string where = "codebook file '" + path + "'";
  if (access(path.c_str(), R_OK) != 0) throw std::runtime_error(where + ": cannot open");
  struct stat st;
  const uint64_t bytes = stat(path.c_str(), &st) == 0 ? (uint64_t)st.st_size : 0;
  // libhdf5 only in the child: it reads the arrays and sends them (the message doubles them).
  const std::string m =
      detail::run_isolated_result([&] { return to_message(read_unisolated(path, where)); }, where,
                                  detail::isolated_cpu_budget(bytes), (64ull << 20) + 3 * bytes);
  return from_message(m, where);
}

}  // namespace kvlab
