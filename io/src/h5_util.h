// Internal: thin RAII and attribute helpers over the HDF5 C API, with errors that name the file.
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kvlab::h5 {

// Owns one HDF5 identifier and closes it with the right H5*close.
class Id {
 public:
  Id() = default;
  explicit Id(hid_t id) : id_(id) {}
  Id(Id&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)) {}
  Id& operator=(Id&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, H5I_INVALID_HID);
    }
    return *this;
  }
  ~Id() { reset(); }
  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  void reset();
  hid_t release() { return std::exchange(id_, H5I_INVALID_HID); }  // caller closes it

 private:
  hid_t id_ = H5I_INVALID_HID;
};

// Debian's libhdf5 is the serial build, not thread-safe: every call into it that may run beside
// another thread (eval's layer prefetch next to a method reading its calibration dump) holds this
// lock. Recursive, since a locked read may open or close identifiers through other helpers.
std::recursive_mutex& library_lock();

// HDF5 prints its error stack to stderr by default; kvlab reports its own messages instead.
void silence_errors();

// The 2-byte IEEE half type, as h5py creates it for numpy.float16 (little-endian); is_half_type
// takes either byte order.
Id half_type();
bool is_half_type(hid_t type);

bool has_attr(hid_t obj, const char* name);
void write_attr(hid_t obj, const char* name, int64_t v);
void write_attr(hid_t obj, const char* name, double v);
void write_attr(hid_t obj, const char* name, const std::string& v);  // variable-length UTF-8

// Readers return nullopt when the attribute is absent and throw (naming `where`) when it has
// the wrong type.
std::optional<int64_t> read_int_attr(hid_t obj, const char* name, const std::string& where);
std::optional<double> read_double_attr(hid_t obj, const char* name, const std::string& where);
std::optional<std::string> read_string_attr(hid_t obj, const char* name, const std::string& where);

bool link_exists(hid_t file, const std::string& path);  // every component checked

// Throws (naming `where`) when the dataset's shape claims more bytes than its storage can
// hold: all of them when unfiltered, 2048 times the stored bytes (deflate inflates at most
// 1032-fold) when filtered. Run before anything of that size is allocated.
void check_storage(hid_t ds, size_t elem_bytes, const std::string& where);

}  // namespace kvlab::h5
