// The temporary file every writer fills before renaming it onto its target, so a reader never
// sees half a file. Named `<path>.tmp.<pid>`; listed in a process-wide registry that SIGINT,
// SIGTERM and SIGHUP empty (the files are unlinked, then the signal kills the process as it
// would have), and checked against leftovers of runs that died on SIGKILL or a power cut.
#pragma once
#include <string>

namespace kvlab {

class TempFile {
 public:
  // Looks for leftovers `<path>.tmp.<pid>`: one whose process no longer runs is removed, with a
  // line on stderr naming it; one whose process runs (another writer of `path`, or an unrelated
  // process that got the same pid) is an error naming the file. Then creates the temporary file
  // empty and exclusively; errors name the file and give the OS reason.
  explicit TempFile(const std::string& path);
  ~TempFile();  // removes the temporary file unless committed
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  const std::string& path() const { return path_; }
  const std::string& tmp() const { return tmp_; }
  // Renames the temporary file onto path(); on failure removes it and throws std::runtime_error
  // with the OS reason.
  void commit();

 private:
  std::string path_, tmp_;
  int slot_ = -1;
  bool committed_ = false;
};

// std::runtime_error "<what>: <strerror(errno)>" (errno as the failed call left it; callers of
// libraries that may fail without setting errno clear it first).
[[noreturn]] void throw_os_error(const std::string& what);

}  // namespace kvlab
