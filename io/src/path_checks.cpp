#include "kvlab/path_checks.h"

#include <sys/stat.h>

#include <cerrno>
#include <filesystem>
#include <stdexcept>

#include "kvlab/temp_file.h"

namespace kvlab {

namespace {

std::string named(const NamedPath& p) { return p.option + " '" + p.path + "'"; }

bool same(const struct stat& a, const struct stat& b) { return a.st_dev == b.st_dev && a.st_ino == b.st_ino; }

// The file `out` (stat'ed as o) lies somewhere under the directory `dir`.
bool inside(const std::string& dir, const struct stat& o) {
  std::error_code ec;
  for (std::filesystem::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    struct stat s {};
    if (stat(it->path().c_str(), &s) == 0 && same(s, o)) return true;
  }
  return false;
}

}  // namespace

void check_input_file(const NamedPath& in) {
  struct stat s {};
  if (stat(in.path.c_str(), &s) != 0) throw_os_error(named(in));
  if (S_ISDIR(s.st_mode)) throw std::runtime_error(named(in) + " is a directory; a file is expected");
}

void check_outputs_not_inputs(const std::vector<NamedPath>& outputs, const std::vector<NamedPath>& inputs) {
  for (const NamedPath& out : outputs) {
    // The directory must exist before the work starts, not only when the result is written.
    const size_t slash = out.path.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : out.path.substr(0, slash);
    struct stat parent {};
    if (stat(dir.c_str(), &parent) != 0) throw_os_error(named(out) + ": directory '" + dir + "'");
    struct stat o {};
    if (stat(out.path.c_str(), &o) != 0) continue;  // nothing there yet: nothing to overwrite
    if (S_ISDIR(o.st_mode))
      throw std::runtime_error(named(out) + " is a directory; give a file name to write");
    for (const NamedPath& in : inputs) {
      struct stat i {};
      if (stat(in.path.c_str(), &i) != 0) continue;
      if (same(i, o) || (S_ISDIR(i.st_mode) && inside(in.path, o)))
        throw std::runtime_error(named(out) + (same(i, o) ? " is the same file as" : " is a file inside") +
                                 " the input " + named(in) +
                                 "; kvlab never writes over its input: choose another output path");
    }
  }
}

}  // namespace kvlab
