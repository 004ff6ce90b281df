// open_dump: pick the reader by what the path holds, never by its extension.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <new>
#include <stdexcept>

#include "kvlab/dump.h"
#include "readers.h"
#include "zip_read.h"

namespace kvlab {

namespace {

constexpr const char* kFormats =
    "accepted: a kvlab HDF5 dump (.h5), a numpy .npz, a directory of .npy files, or a torch.save file (.pt); "
    "see docs/DUMP_FORMAT.md";

[[noreturn]] void fail(const std::string& msg) { throw std::runtime_error(msg); }

// torch.save's ZIP holds "<archive>/data.pkl" (and "<archive>/data/<n>" storages); a .npz holds *.npy.
bool is_torch_zip(const std::string& path) {
  const detail::ZipArchive zip(path);
  for (const auto& e : zip.entries()) {
    const std::string& n = e.name;
    if (n == "data.pkl" || (n.size() > 9 && n.compare(n.size() - 9, 9, "/data.pkl") == 0)) return true;
  }
  return false;
}

std::unique_ptr<DumpReader> open_by_content(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (path.empty()) fail(std::string("no dump path given; ") + kFormats);
  if (!fs::exists(path, ec)) fail("'" + path + "': no such file or directory; " + kFormats);
  if (fs::is_directory(path, ec)) return detail::open_numpy_dump(path);

  unsigned char head[8] = {};
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("'" + path + "': cannot open file");
  f.read(reinterpret_cast<char*>(head), sizeof head);
  const size_t n = (size_t)f.gcount();
  f.close();

  if (n == 8 && std::memcmp(head, "\x89HDF\r\n\x1a\n", 8) == 0) return detail::open_hdf5_dump(path);
  if (n >= 4 && std::memcmp(head, "PK", 2) == 0 && detail::looks_like_zip(path))
    return is_torch_zip(path) ? detail::open_torch_dump(path) : detail::open_numpy_dump(path);
  if (n >= 6 && std::memcmp(head, "\x93NUMPY", 6) == 0) return detail::open_numpy_dump(path);  // explains
  if (n >= 2 && head[0] == 0x80 && head[1] >= 2 && head[1] <= 5)
    fail("'" + path +
         "' is a bare Python pickle (torch.save with _use_new_zipfile_serialization=False, or "
         "pickle.dump); save it again with torch.save(obj, path) from torch 1.6 or later, or as .npz; " +
         kFormats);
  fail("'" + path + "': unknown format (" + (n == 0 ? std::string("empty file") : "not HDF5, ZIP or .npy") +
       "); " + kFormats);
}

}  // namespace

std::unique_ptr<DumpReader> open_dump(const std::string& path) {
  // The readers check sizes before allocating; should one still fail, the message names the file.
  try {
    return open_by_content(path);
  } catch (const std::bad_alloc&) {
    fail("'" + path + "': out of memory while opening it");
  } catch (const std::length_error& e) {
    fail("'" + path + "': a size in the file is too large (" + e.what() + ")");
  }
}

}  // namespace kvlab
