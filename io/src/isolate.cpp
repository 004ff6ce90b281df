#include "isolate.h"

#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <vector>

// Set by sanitizer runtimes (libFuzzer writes its crash file from the death callback).
extern "C" void __sanitizer_set_death_callback(void (*)(void)) __attribute__((weak));

namespace kvlab::detail {
namespace {

constexpr int kThrew = 3;  // exit status of a child whose fn threw (its message is in the pipe)

uint64_t address_space_bytes() {
  unsigned long pages = 0;
  if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%lu", &pages) != 1) pages = 0;
    std::fclose(f);
  }
  return (uint64_t)pages * (uint64_t)sysconf(_SC_PAGESIZE);
}

[[noreturn]] void child(const std::function<std::string()>& fn, const std::string& what, int out,
                        double cpu_seconds, uint64_t memory) {
  // A crash ends the child quietly; the parent reports it.
  for (int s : {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL}) signal(s, SIG_DFL);
  itimerval t{};
  t.it_value.tv_sec = (time_t)cpu_seconds;
  t.it_value.tv_usec = (suseconds_t)((cpu_seconds - (double)t.it_value.tv_sec) * 1e6);
  signal(SIGPROF, SIG_DFL);
  setitimer(ITIMER_PROF, &t, nullptr);  // SIGPROF (user + system CPU time) ends the child
  // Under ASan its shadow is mapped already, so the limit holds there too; a sanitizer report
  // ends the child without the fuzzer's death callback (no crash file for a contained defect).
  if (__sanitizer_set_death_callback) __sanitizer_set_death_callback(nullptr);
  const rlimit mem{address_space_bytes() + memory, RLIM_INFINITY};
  setrlimit(RLIMIT_AS, &mem);
  auto report = [&](const std::string& m) {
    if (write(out, m.data(), m.size()) != (ssize_t)m.size()) _exit(kThrew + 1);
    _exit(kThrew);
  };
  std::string result;
  try {
    result = fn();
  } catch (const std::bad_alloc&) {
    report(what + ": parsing it needs more than " + std::to_string(memory >> 20) +
           " MiB of memory: its sizes are corrupt");
  } catch (const std::exception& e) {
    report(e.what());
  } catch (...) {
    _exit(kThrew + 1);
  }
  for (size_t at = 0; at < result.size();) {
    const ssize_t n = write(out, result.data() + at, result.size() - at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) _exit(kThrew + 1);
    at += (size_t)n;
  }
  _exit(0);
}

}  // namespace

double isolated_cpu_budget(uint64_t bytes) { return 0.5 + (double)bytes / (double)(1ull << 30); }

void run_isolated(const std::function<void()>& fn, const std::string& what, double cpu_seconds,
                  uint64_t memory) {
  run_isolated_result(
      [&] {
        fn();
        return std::string();
      },
      what, cpu_seconds, memory);
}

std::string run_isolated_result(const std::function<std::string()>& fn, const std::string& what,
                                double cpu_seconds, uint64_t memory) {
  if (const char* e = std::getenv("KVLAB_PARSE_IN_PROCESS"); e && std::strcmp(e, "1") == 0) return fn();
  int fds[2];
  if (pipe(fds) != 0) throw std::runtime_error(what + ": cannot create a pipe: " + std::strerror(errno));
  std::fflush(nullptr);  // nothing buffered is written twice
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    throw std::runtime_error(what + ": cannot fork the parsing process: " + std::strerror(errno));
  }
  if (pid == 0) {
    close(fds[0]);
    child(fn, what, fds[1], cpu_seconds, memory);
  }
  close(fds[1]);
  // The CPU timer ends a busy child; this wall-clock limit ends one that blocks.
  const int wall_ms = (int)(cpu_seconds * 1000) * 20 + 10000;
  std::string msg;
  std::vector<char> buf(1 << 16);
  pollfd p{fds[0], POLLIN, 0};
  bool timed_out = false, oversized = false;
  for (;;) {
    const int r = poll(&p, 1, wall_ms);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      timed_out = true;
      kill(pid, SIGKILL);
      break;
    }
    const ssize_t n = read(fds[0], buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    msg.append(buf.data(), (size_t)n);
    if (msg.size() > memory) {  // more than the child could have held: not its result
      oversized = true;
      kill(pid, SIGKILL);
      break;
    }
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  const bool ended = !timed_out && !oversized && WIFEXITED(status);
  if (ended && WEXITSTATUS(status) == 0) return msg;
  if (ended && WEXITSTATUS(status) == kThrew) throw std::runtime_error(msg);
  std::string why;
  if (oversized)
    why = "sent more than " + std::to_string(memory >> 20) + " MiB";
  else if (timed_out)
    why = "did not finish within " + std::to_string(wall_ms / 1000) + " s";
  else if (WIFSIGNALED(status) && WTERMSIG(status) == SIGPROF)
    why = "used more than " + std::to_string(cpu_seconds).substr(0, 4) + " s of CPU time (an endless loop)";
  else if (WIFSIGNALED(status))
    why = std::string("crashed (") + strsignal(WTERMSIG(status)) + ")";
  else
    why = "failed (exit status " + std::to_string(WEXITSTATUS(status)) + ", out of memory?)";
  throw std::runtime_error(
      what + ": the parser " + why +
      " on it: the file is corrupt (kvlab parses HDF5 and torch.save files in a separate "
      "process; see docs/RELIABILITY.md)");
}

}  // namespace kvlab::detail
