// The reference model's dump, made on first use and cached (reference_dump.h).
#include "kvlab/reference_dump.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <vector>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include "kvlab/atomic_file.h"
#include "kvlab/dump.h"
#include "kvlab/hash.h"
#include "kvlab/hf_model.h"
#include "kvlab/hf_tokenizer.h"
#include "kvlab/temp_file.h"

namespace kvlab {
namespace {

namespace fs = std::filesystem;

// Bump when the way the dump is made changes (tokens, runner settings, the decoder's
// arithmetic): the key then changes and old cache files are never read again.
constexpr uint64_t kRecipeVersion = 1;

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_os_error("'" + path + "': cannot read");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// FNV-1a over 64-bit words (the tail byte by byte), finished with fmix64: fast enough to hash
// the 37 MB model and the dump on every run.
uint64_t hash_bytes(const std::string& s, uint64_t h) {
  constexpr uint64_t kPrime = 0x100000001b3ull;
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h = (h ^ w) * kPrime;
  }
  for (; i < s.size(); ++i) h = (h ^ (unsigned char)s[i]) * kPrime;
  return murmur3_fmix64(h ^ s.size());
}

std::string hex(uint64_t h) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", (unsigned long long)h);
  return buf;
}

std::string model_dir_of(const ReferenceDumpOptions& o) {
  if (!o.model_dir.empty()) return o.model_dir;
  if (const char* e = env("KVLAB_REF_MODEL")) return e;
  return KVLAB_REFERENCE_MODEL_DIR;
}

std::string cache_dir_of(const ReferenceDumpOptions& o) {
  if (!o.cache_dir.empty()) return o.cache_dir;
  if (const char* e = env("KVLAB_CACHE_DIR")) return e;
  if (const char* e = env("XDG_CACHE_HOME")) return (fs::path(e) / "kvlab").string();
  if (const char* e = env("HOME")) return (fs::path(e) / ".cache" / "kvlab").string();
  throw std::runtime_error(
      "no cache directory for the reference model's dump: HOME is not set; pass --cache-dir DIR or set "
      "KVLAB_CACHE_DIR");
}

// The held-out text as `kvlab tokenize --prompt-file` reads it (one trailing newline dropped).
std::string heldout_text(const std::string& path) {
  std::string s = read_file(path);
  if (!s.empty() && s.back() == '\n') s.pop_back();
  if (!s.empty() && s.back() == '\r') s.pop_back();
  return s;
}

// Every file the runner reads (*.json, *.safetensors), in name order, with its name.
uint64_t model_hash(const std::string& dir, uint64_t h) {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string ext = e.path().extension().string();
    if (e.is_regular_file() && (ext == ".json" || ext == ".safetensors")) files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  for (const fs::path& f : files) h = hash_bytes(read_file(f.string()), hash_bytes(f.filename().string(), h));
  return h;
}

// Holds an exclusive flock on `path` (created if absent; never removed, so every process
// locks the same inode) until destroyed; the kernel releases it if the process dies.
class FileLock {
 public:
  FileLock(const std::string& path, bool quiet) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) throw_os_error("cannot open the lock file '" + path + "'");
    if (::flock(fd_, LOCK_EX | LOCK_NB) == 0) return;
    if (!quiet)
      std::fprintf(stderr, "kvlab: waiting for another kvlab process making this dump (%s)\n", path.c_str());
    while (::flock(fd_, LOCK_EX) != 0)
      if (errno != EINTR) throw_os_error("cannot lock '" + path + "'");
  }
  ~FileLock() { ::close(fd_); }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

void make_dump(const std::string& dir, const std::string& name, const std::vector<int32_t>& ids,
               const HfTokenizer& tok, const std::string& path) {
  const HfModel model = load_hf_model(dir);
  const HfConfig& c = model.config;
  check_hf_sequence(c, (int64_t)ids.size());
  GenerateParams params;
  params.steps = 0;
  Generation gen = generate(model.weights, ids, params, c.eos_token_ids, c.max_position_embeddings, false,
                            "'" + dir + "'");
  gen.text = tok.decode(gen.tokens);
  const std::string source = "kvlab eval's default dump: the first " + std::to_string(ids.size()) +
                             " ids of `kvlab tokenize --model " + dir + " --prompt-file " + dir +
                             "/heldout.txt`, then `kvlab dump --model " + dir + " --tokens IDS --steps 0`";
  write_generation_dump(path, hf_dump_info(model, gen, name, source), gen);
}

}  // namespace

ReferenceDump reference_dump(const ReferenceDumpOptions& o) {
  const std::string dir = model_dir_of(o);
  for (const char* f : {"config.json", "tokenizer.json", "heldout.txt"})
    if (!fs::is_regular_file(fs::path(dir) / f))
      throw std::runtime_error("no dump given, and the reference model for the default dump is not at '" +
                               dir + "' (no " + f +
                               " there): pass a dump (e.g. data/stories260K.h5), set KVLAB_REF_MODEL to a "
                               "copy of data/kvlab-ref-18m, or KVLAB_DEFAULT_DUMP to a dump");
  if (o.tokens < 1) throw std::invalid_argument("reference dump: tokens must be >= 1");
  const HfTokenizer tok((fs::path(dir) / "tokenizer.json").string());
  std::vector<int32_t> ids = tok.encode(heldout_text((fs::path(dir) / "heldout.txt").string()));
  if ((int64_t)ids.size() < o.tokens)
    throw std::runtime_error("'" + dir + "/heldout.txt' has " + std::to_string(ids.size()) +
                             " tokens, fewer than the " + std::to_string(o.tokens) +
                             " the default dump needs");
  ids.resize(o.tokens);

  const fs::path norm = fs::path(dir).lexically_normal();
  const std::string name = (norm.has_filename() ? norm : norm.parent_path()).filename().string();
  uint64_t key = hash_bytes("kvlab reference dump", kRecipeVersion ^ ((uint64_t)dump_format_version() << 32));
  key = hash_bytes(std::string((const char*)ids.data(), ids.size() * sizeof(int32_t)), key);
  key = model_hash(dir, key);

  const std::string cache = cache_dir_of(o);
  std::error_code ec;
  fs::create_directories(cache, ec);
  if (ec) throw std::runtime_error("cannot create the cache directory '" + cache + "': " + ec.message());
  const std::string stem =
      (fs::path(cache) / (name + "-" + std::to_string(o.tokens) + "-" + hex(key))).string();
  const std::string path = stem + ".h5", sum = path + ".fnv64";
  const FileLock lock(stem + ".lock", o.quiet);

  if (fs::exists(path)) {
    const std::string want = fs::exists(sum) ? read_file(sum) : "";
    if (!want.empty() && want == hex(hash_bytes(read_file(path), 0)) + "\n") {
      if (!o.quiet)
        std::fprintf(stderr,
                     "kvlab: no dump given: using the reference model's dump %s (cached; %lld tokens of "
                     "%s/heldout.txt)\n",
                     path.c_str(), (long long)o.tokens, dir.c_str());
      return {path, false};
    }
    if (!o.quiet)
      std::fprintf(stderr, "kvlab: the cached dump %s does not match its checksum %s; making it again\n",
                   path.c_str(), sum.c_str());
  }
  fs::remove(sum, ec);  // the old checksum must never vouch for the new file
  if (!o.quiet)
    std::fprintf(
        stderr,
        "kvlab: no dump given: making the reference model's dump (%s on the first %lld tokens of its "
        "heldout.txt), once; it is cached as %s (--cache-dir or KVLAB_CACHE_DIR to choose another "
        "directory) ...\n",
        dir.c_str(), (long long)o.tokens, path.c_str());
  const auto t0 = std::chrono::steady_clock::now();
  make_dump(dir, name, ids, tok, path);
  write_file_atomically(sum, hex(hash_bytes(read_file(path), 0)) + "\n");
  if (!o.quiet)
    std::fprintf(stderr, "kvlab: made %s (%.1f MB) in %.1f s\n", path.c_str(),
                 (double)fs::file_size(path) / 1e6,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return {path, true};
}

std::string default_eval_dump(const ReferenceDumpOptions& options) {
  if (const char* e = env("KVLAB_DEFAULT_DUMP")) return e;
  return reference_dump(options).path;
}

}  // namespace kvlab
