#include "kvlab/temp_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <utility>
#include <vector>

namespace kvlab {

void throw_os_error(const std::string& what) {
  throw std::runtime_error(what + ": " + (errno ? std::strerror(errno) : "no OS error was reported"));
}

namespace {

// The registry lives in fixed arrays: the signal handler may only read plain memory and call
// async-signal-safe functions (unlink, sigaction, raise), never a std::string or a lock.
constexpr int kSlots = 64;
constexpr size_t kMaxPath = 4096;
char g_paths[kSlots][kMaxPath];
std::atomic<int> g_state[kSlots];  // 0 free, 1 being filled, 2 live
constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP};

extern "C" void remove_temp_files_and_die(int sig) {
  for (int i = 0; i < kSlots; ++i)
    if (g_state[i].load() == 2) unlink(g_paths[i]);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigaction(sig, &dfl, nullptr);
  raise(sig);  // delivered when the handler returns: the process ends as the signal meant
}

// Once per process, for each signal still at its default action (a host that set its own
// handler, or nohup's ignored SIGHUP, keeps it).
void install_handlers() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (int sig : kSignals) {
      struct sigaction old {};
      if (sigaction(sig, nullptr, &old) != 0 || old.sa_handler != SIG_DFL) continue;
      struct sigaction sa {};
      sa.sa_handler = remove_temp_files_and_die;
      sigemptyset(&sa.sa_mask);
      for (int s : kSignals) sigaddset(&sa.sa_mask, s);
      sigaction(sig, &sa, nullptr);
    }
  });
}

int claim_slot(const std::string& tmp) {
  if (tmp.size() >= kMaxPath) throw std::runtime_error("'" + tmp + "': path too long");
  for (int i = 0; i < kSlots; ++i) {
    int expected = 0;
    if (g_state[i].compare_exchange_strong(expected, 1)) {
      std::memcpy(g_paths[i], tmp.c_str(), tmp.size() + 1);
      g_state[i].store(2);
      return i;
    }
  }
  throw std::runtime_error("'" + tmp + "': more than " + std::to_string(kSlots) +
                           " files are being written at once");
}

bool live_here(const std::string& tmp) {
  for (int i = 0; i < kSlots; ++i)
    if (g_state[i].load() == 2 && tmp == g_paths[i]) return true;
  return false;
}

// "<base>.tmp.<digits>" -> the pid, else -1.
long leftover_pid(const std::string& name, const std::string& prefix) {
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return -1;
  long pid = 0;
  for (size_t i = prefix.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9' || pid > 1000000000) return -1;
    pid = pid * 10 + (name[i] - '0');
  }
  return pid;
}

// Removes leftovers of dead processes; refuses when one may belong to a running writer.
void handle_leftovers(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  const std::string prefix = (slash == std::string::npos ? path : path.substr(slash + 1)) + ".tmp.";
  DIR* d = opendir(dir.c_str());
  if (!d) return;  // creating the temporary file below reports why the directory is unusable
  std::vector<std::pair<std::string, long>> found;
  while (const dirent* e = readdir(d)) {
    const long pid = leftover_pid(e->d_name, prefix);
    if (pid > 0) found.emplace_back(dir + "/" + e->d_name, pid);
  }
  closedir(d);
  for (const auto& [file, pid] : found) {
    const bool ours = pid == (long)getpid();
    if (ours && live_here(file))
      throw std::runtime_error("'" + path + "' is already being written by this process");
    if (!ours && (kill((pid_t)pid, 0) == 0 || errno == EPERM))
      throw std::runtime_error("'" + file + "' exists: process " + std::to_string(pid) + " may be writing '" +
                               path + "' now; wait for it, or remove that file if " + "process " +
                               std::to_string(pid) + " is not a kvlab run");
    if (unlink(file.c_str()) != 0 && errno != ENOENT)
      throw_os_error("cannot remove '" + file + "', left by an interrupted run");
    std::fprintf(stderr, "kvlab: removed '%s', left by an interrupted run (process %ld is gone)\n",
                 file.c_str(), pid);
  }
}

}  // namespace

TempFile::TempFile(const std::string& path) : path_(path), tmp_(path + ".tmp." + std::to_string(getpid())) {
  install_handlers();
  handle_leftovers(path_);
  slot_ = claim_slot(tmp_);  // listed before it exists: a signal in between unlinks nothing
  const int fd = open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) {
    const int err = errno;
    g_state[slot_].store(0);
    errno = err;
    throw_os_error("cannot create '" + tmp_ + "' (to become '" + path_ + "')");
  }
  close(fd);
}

TempFile::~TempFile() {
  if (!committed_) unlink(tmp_.c_str());
  g_state[slot_].store(0);
}

void TempFile::commit() {
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    unlink(tmp_.c_str());
    errno = err;
    throw_os_error("cannot rename '" + tmp_ + "' onto '" + path_ + "'");
  }
  committed_ = true;
}

}  // namespace kvlab
