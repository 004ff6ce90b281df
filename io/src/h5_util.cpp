#include "h5_util.h"

#include <stdexcept>

namespace kvlab::h5 {

std::recursive_mutex& library_lock() {
  static std::recursive_mutex lock;
  return lock;
}

void Id::reset() {
  if (id_ < 0) return;
  switch (H5Iget_type(id_)) {
    case H5I_FILE: H5Fclose(id_); break;
    case H5I_GROUP: H5Gclose(id_); break;
    case H5I_DATASET: H5Dclose(id_); break;
    case H5I_DATASPACE: H5Sclose(id_); break;
    case H5I_DATATYPE: H5Tclose(id_); break;
    case H5I_ATTR: H5Aclose(id_); break;
    case H5I_GENPROP_LST: H5Pclose(id_); break;
    default: break;
  }
  id_ = H5I_INVALID_HID;
}

void silence_errors() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

Id half_type() {
  Id t(H5Tcopy(H5T_IEEE_F32LE));
  if (!t.valid() || H5Tset_fields(t.get(), 15, 10, 5, 0, 10) < 0 || H5Tset_size(t.get(), 2) < 0 ||
      H5Tset_ebias(t.get(), 15) < 0)
    throw std::runtime_error("HDF5: cannot build the float16 type");
  return t;
}

bool is_half_type(hid_t type) {
  if (H5Tget_class(type) != H5T_FLOAT || H5Tget_size(type) != 2) return false;
  size_t spos, epos, esize, mpos, msize;
  if (H5Tget_fields(type, &spos, &epos, &esize, &mpos, &msize) < 0) return false;
  return spos == 15 && epos == 10 && esize == 5 && mpos == 0 && msize == 10 && H5Tget_ebias(type) == 15 &&
         H5Tget_norm(type) == H5T_NORM_IMPLIED;
}

bool has_attr(hid_t obj, const char* name) { return H5Aexists(obj, name) > 0; }

static void write_raw_attr(hid_t obj, const char* name, hid_t type, const void* v) {
  Id space(H5Screate(H5S_SCALAR));
  if (has_attr(obj, name)) H5Adelete(obj, name);
  Id a(H5Acreate2(obj, name, type, space.get(), H5P_DEFAULT, H5P_DEFAULT));
  if (!a.valid() || H5Awrite(a.get(), type, v) < 0)
    throw std::runtime_error(std::string("HDF5: cannot write attribute '") + name + "'");
}

void write_attr(hid_t obj, const char* name, int64_t v) { write_raw_attr(obj, name, H5T_STD_I64LE, &v); }
void write_attr(hid_t obj, const char* name, double v) { write_raw_attr(obj, name, H5T_IEEE_F64LE, &v); }
void write_attr(hid_t obj, const char* name, const std::string& v) {
  Id t(H5Tcopy(H5T_C_S1));
  H5Tset_size(t.get(), H5T_VARIABLE);
  H5Tset_cset(t.get(), H5T_CSET_UTF8);
  const char* p = v.c_str();
  write_raw_attr(obj, name, t.get(), &p);
}

static Id open_scalar_attr(hid_t obj, const char* name, const std::string& where) {
  Id a(H5Aopen(obj, name, H5P_DEFAULT));
  if (!a.valid()) throw std::runtime_error(where + ": cannot open attribute '" + name + "'");
  Id space(H5Aget_space(a.get()));
  if (H5Sget_simple_extent_npoints(space.get()) != 1)
    throw std::runtime_error(where + ": attribute '" + name + "' must be a single value");
  return a;
}

std::optional<int64_t> read_int_attr(hid_t obj, const char* name, const std::string& where) {
  if (!has_attr(obj, name)) return std::nullopt;
  Id a = open_scalar_attr(obj, name, where);
  Id t(H5Aget_type(a.get()));
  int64_t v = 0;
  // bool attributes written by h5py are an enum over int8; HDF5 converts those too
  if ((H5Tget_class(t.get()) != H5T_INTEGER && H5Tget_class(t.get()) != H5T_ENUM) ||
      H5Aread(a.get(), H5T_NATIVE_INT64, &v) < 0)
    throw std::runtime_error(where + ": attribute '" + name + "' is not an integer");
  return v;
}

std::optional<double> read_double_attr(hid_t obj, const char* name, const std::string& where) {
  if (!has_attr(obj, name)) return std::nullopt;
  Id a = open_scalar_attr(obj, name, where);
  Id t(H5Aget_type(a.get()));
  const H5T_class_t c = H5Tget_class(t.get());
  double v = 0;
  if ((c != H5T_FLOAT && c != H5T_INTEGER) || H5Aread(a.get(), H5T_NATIVE_DOUBLE, &v) < 0)
    throw std::runtime_error(where + ": attribute '" + name + "' is not a number");
  return v;
}

std::optional<std::string> read_string_attr(hid_t obj, const char* name, const std::string& where) {
  if (!has_attr(obj, name)) return std::nullopt;
  Id a = open_scalar_attr(obj, name, where);
  Id t(H5Aget_type(a.get()));
  if (H5Tget_class(t.get()) != H5T_STRING)
    throw std::runtime_error(where + ": attribute '" + name + "' is not a string");
  if (H5Tis_variable_str(t.get()) > 0) {
    Id mem(H5Tcopy(H5T_C_S1));
    H5Tset_size(mem.get(), H5T_VARIABLE);
    H5Tset_cset(mem.get(), H5Tget_cset(t.get()));
    char* p = nullptr;
    if (H5Aread(a.get(), mem.get(), &p) < 0)
      throw std::runtime_error(where + ": cannot read attribute '" + name + "'");
    std::string s = p ? p : "";
    H5free_memory(p);
    return s;
  }
  const size_t n = H5Tget_size(t.get());
  if (n == 0 || n > (1u << 20))  // a size from the file: checked before it is allocated
    throw std::runtime_error(where + ": attribute '" + name + "' claims a string of " + std::to_string(n) +
                             " bytes (at most 1 MiB is read)");
  std::string s(n, '\0');
  if (H5Aread(a.get(), t.get(), s.data()) < 0)
    throw std::runtime_error(where + ": cannot read attribute '" + name + "'");
  s.resize(s.find('\0') == std::string::npos ? n : s.find('\0'));  // fixed strings may be NUL-padded
  return s;
}

void check_storage(hid_t ds, size_t elem_bytes, const std::string& where) {
  Id space(H5Dget_space(ds));
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 0 || rank > 32) throw std::runtime_error(where + ": unreadable dataspace");
  std::vector<hsize_t> dims(rank);
  if (rank > 0 && H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr) < 0)
    throw std::runtime_error(where + ": unreadable dataspace");
  uint64_t claimed = elem_bytes;
  for (hsize_t d : dims)
    if (__builtin_mul_overflow(claimed, (uint64_t)d, &claimed))
      throw std::runtime_error(where + ": its shape's byte count overflows");
  Id dcpl(H5Dget_create_plist(ds));
  const bool filtered = H5Pget_layout(dcpl.get()) == H5D_CHUNKED && H5Pget_nfilters(dcpl.get()) > 0;
  const uint64_t stored = H5Dget_storage_size(ds);
  const uint64_t most = filtered ? (stored > UINT64_MAX / 2048 ? UINT64_MAX : stored * 2048) : stored;
  if (claimed > most)
    throw std::runtime_error(where + ": its shape claims " + std::to_string(claimed) +
                             " bytes but the file stores " + std::to_string(stored) +
                             (filtered ? " compressed" : "") + " (truncated or corrupt file?)");
}

bool link_exists(hid_t file, const std::string& path) {
  size_t pos = 0;
  while (true) {
    pos = path.find('/', pos + 1);
    const std::string prefix = path.substr(0, pos);
    if (H5Lexists(file, prefix.c_str(), H5P_DEFAULT) <= 0) return false;
    if (pos == std::string::npos) return true;
  }
}

}  // namespace kvlab::h5
