// TempFile and AtomicFile: the temporary name is gone after commit, after an error and after
// SIGINT/SIGTERM; leftovers of dead processes are removed with a message, those of running
// processes stop the write; errors carry the OS reason.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "../core/test_util.h"
#include "kvlab/atomic_file.h"
#include "kvlab/temp_file.h"

namespace {

using kvlab::AtomicFile;
using kvlab::TempFile;
using kvtest::message_of;
using kvtest::TempDir;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string tmp_of(const std::string& path, long pid) { return path + ".tmp." + std::to_string(pid); }

TEST(TempFile, CommitReplacesTheTargetAndLeavesNoTemporaryName) {
  TempDir dir;
  const std::string out = dir.file("a.txt");
  std::ofstream(out) << "old";
  kvlab::write_file_atomically(out, "new");
  EXPECT_EQ(read_all(out), "new");
  EXPECT_FALSE(fs::exists(tmp_of(out, getpid())));
}

TEST(TempFile, WithoutCommitTheTemporaryFileIsRemovedAndTheTargetKept) {
  TempDir dir;
  const std::string out = dir.file("a.txt");
  std::ofstream(out) << "old";
  {
    AtomicFile f(out);
    f.write("half", 4);
    EXPECT_TRUE(fs::exists(tmp_of(out, getpid())));
  }
  EXPECT_FALSE(fs::exists(tmp_of(out, getpid())));
  EXPECT_EQ(read_all(out), "old");
}

TEST(TempFile, ErrorsNameTheFileAndTheOsReason) {
  const std::string e = message_of<std::runtime_error>([] { TempFile t("/nonexistent-kvlab-dir/x.h5"); });
  EXPECT_THAT(e, HasSubstr("cannot create '/nonexistent-kvlab-dir/x.h5.tmp."));
  EXPECT_THAT(e, HasSubstr("No such file or directory"));
  TempDir dir;
  fs::create_directory(dir.file("d"));
  // Renaming a file onto a directory fails: the OS says why.
  const std::string r =
      message_of<std::runtime_error>([&] { kvlab::write_file_atomically(dir.file("d"), "x"); });
  EXPECT_THAT(r, HasSubstr("cannot rename"));
  EXPECT_THAT(r, HasSubstr("Is a directory"));
  EXPECT_FALSE(fs::exists(tmp_of(dir.file("d"), getpid())));
}

TEST(TempFile, LeftoverOfADeadProcessIsRemovedWithAMessage) {
  TempDir dir;
  const std::string out = dir.file("a.h5");
  const pid_t child = fork();
  if (child == 0) _exit(0);
  waitpid(child, nullptr, 0);  // a pid that no process holds now
  std::ofstream(tmp_of(out, child)) << "690 MB of an interrupted run";
  testing::internal::CaptureStderr();
  kvlab::write_file_atomically(out, "x");
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_FALSE(fs::exists(tmp_of(out, child)));
  EXPECT_THAT(err, HasSubstr("removed '" + tmp_of(out, child) + "', left by an interrupted run (process " +
                             std::to_string(child) + " is gone)"));
  EXPECT_EQ(read_all(out), "x");
}

TEST(TempFile, LeftoverOfARunningProcessStopsTheWriteNamed) {
  TempDir dir;
  const std::string out = dir.file("a.h5");
  const long parent = getppid();  // alive: it waits for this test
  std::ofstream(tmp_of(out, parent)) << "another writer";
  const std::string e = message_of<std::runtime_error>([&] { kvlab::write_file_atomically(out, "x"); });
  // Appended piece by piece: gcc 12 warns (a false -Wrestrict) on "literal" + std::string&&.
  std::string want = "'";
  want += tmp_of(out, parent);
  want += "' exists: process ";
  want += std::to_string(parent);
  want += " may be writing '" + out + "' now";
  EXPECT_THAT(e, HasSubstr(want));
  EXPECT_TRUE(fs::exists(tmp_of(out, parent)));
  EXPECT_FALSE(fs::exists(out));
  // Other files that merely share the prefix are not leftovers.
  fs::remove(tmp_of(out, parent));
  std::ofstream(out + ".tmp.12x") << "";
  std::ofstream(out + ".tmp.") << "";
  kvlab::write_file_atomically(out, "x");
  EXPECT_TRUE(fs::exists(out + ".tmp.12x"));
  EXPECT_TRUE(fs::exists(out + ".tmp."));
}

// A child writes, the parent signals it; the child must die by that signal with no temporary
// file left, and the target untouched.
void expect_signal_cleans_up(int sig) {
  TempDir dir;
  const std::string out = dir.file("a.h5");
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  if (child == 0) {
    AtomicFile f(out);
    f.write("partial", 7);
    const char c = 1;
    if (write(ready[1], &c, 1) != 1) _exit(3);
    pause();
    _exit(2);  // not reached: the signal ends the process
  }
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  EXPECT_TRUE(fs::exists(tmp_of(out, child)));
  kill(child, sig);
  int status = 0;
  waitpid(child, &status, 0);
  close(ready[0]);
  close(ready[1]);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == sig) << "status " << status;
  EXPECT_FALSE(fs::exists(tmp_of(out, child)));
  EXPECT_FALSE(fs::exists(out));
}

TEST(TempFile, SigintRemovesTheTemporaryFileAndEndsTheProcess) { expect_signal_cleans_up(SIGINT); }
TEST(TempFile, SigtermRemovesTheTemporaryFileAndEndsTheProcess) { expect_signal_cleans_up(SIGTERM); }

}  // namespace
