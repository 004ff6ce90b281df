// torch.save files read as dumps. The libtorch code lives in a plugin (torch_plugin/, built
// when CMake finds libtorch) loaded here with dlopen on the first torch file, so programs that
// never open one do not pay libtorch's start-up (~0.8 s, ~150 MB).
#include <dlfcn.h>

#include <memory>
#include <mutex>
#include <stdexcept>

#include "array_source.h"
#include "isolate.h"
#include "named_dump.h"
#include "readers.h"
#include "zip_read.h"

namespace kvlab::detail {

namespace {

constexpr const char* kConvert =
    "convert it to .npz in Python: d = torch.load(path); numpy.savez('dump.npz', "
    "**{k: t.float().numpy() for k, t in d.items()})";

using OpenFn = ArraySource* (*)(const std::string&);

#ifdef KVLAB_TORCH_PLUGIN
OpenFn load_plugin(const std::string& path) {
  static std::once_flag once;
  static OpenFn fn = nullptr;
  static std::string error;
  std::call_once(once, [] {
    void* lib = dlopen(KVLAB_TORCH_PLUGIN, RTLD_NOW | RTLD_LOCAL);  // kept loaded for the process
    if (!lib) {
      const char* e = dlerror();
      error = std::string("cannot load kvlab's libtorch plugin " KVLAB_TORCH_PLUGIN ": ") +
              (e ? e : "unknown error");
      return;
    }
    fn = reinterpret_cast<OpenFn>(dlsym(lib, "kvlab_open_torch_source"));
    if (!fn) error = "kvlab's libtorch plugin " KVLAB_TORCH_PLUGIN " lacks kvlab_open_torch_source";
  });
  if (!fn)
    throw std::runtime_error("'" + path + "' is a torch.save file, but " + error + "; rebuild kvlab, or " +
                             kConvert);
  return fn;
}
#endif

}  // namespace

std::unique_ptr<DumpReader> open_torch_dump(const std::string& path) {
#ifdef KVLAB_TORCH_PLUGIN
  // libtorch checks no CRC and trusts the pickle's sizes: kvlab checks every member's CRC, then
  // lets libtorch parse the file in a child process (memory: 64 MiB plus 4 times the file, as
  // the tensors are held in memory) before it parses it here.
  const ZipArchive zip(path);
  uint64_t bytes = 0;
  for (const ZipEntry& e : zip.entries()) {
    zip.verify(e);
    bytes += e.size;
  }
  const OpenFn open = load_plugin(path);
  run_isolated([&] { delete open(path); }, "'" + path + "'", isolated_cpu_budget(bytes) * 4,
               (64ull << 20) + 4 * bytes);
  std::shared_ptr<const ArraySource> src(open(path));
  return make_named_array_dump(std::move(src), "torch.save file");
#else
  throw std::runtime_error(
      "'" + path +
      "' is a torch.save file, but kvlab was built without libtorch (install libtorch-dev and "
      "rebuild), or " +
      kConvert);
#endif
}

}  // namespace kvlab::detail
