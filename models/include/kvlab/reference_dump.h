// The dump `kvlab eval` uses when it is given none: kvlab's reference model (data/kvlab-ref-18m)
// run by the C++ runner on the first 2048 tokens of its held-out book (what scripts/demo.sh
// does), made on first use and cached. The cache file is keyed by a hash of the model's files,
// the token ids, the dump format version and this recipe's version, so a changed model never
// reuses a stale dump; a checksum file beside it catches a damaged copy, which is made again.
// Writers take a lock (flock) on the key, so two processes at once make it once between them.
#pragma once
#include <cstdint>
#include <string>

namespace kvlab {

struct ReferenceDumpOptions {
  std::string model_dir;  // empty: $KVLAB_REF_MODEL, else kvlab's data/kvlab-ref-18m
  std::string cache_dir;  // empty: $KVLAB_CACHE_DIR, else $XDG_CACHE_HOME/kvlab, else ~/.cache/kvlab
  int64_t tokens = 2048;  // the first N tokens (BOS included) of model_dir/heldout.txt
  bool quiet = false;     // no lines on stderr
};

struct ReferenceDump {
  std::string path;   // the cached HDF5 dump
  bool made = false;  // made by this call (absent, or its checksum did not match)
};

// Returns the cached dump, making it first when it is absent or damaged; tells on stderr which
// dump is used, where it is cached, and progress while making it. Throws std::runtime_error
// naming the directory and what to pass instead when the model directory or one of its files
// is missing, and naming the cache directory (with the OS reason) when it cannot be written.
ReferenceDump reference_dump(const ReferenceDumpOptions& options = {});

// The dump of a command given none: $KVLAB_DEFAULT_DUMP when set, else reference_dump()'s.
std::string default_eval_dump(const ReferenceDumpOptions& options = {});

}  // namespace kvlab
