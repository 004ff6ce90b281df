// The method registry: core's families first, in a fixed order, then those other libraries add.
#include <memory>
#include <mutex>
#include <stdexcept>

#include "kvlab/kv_text.h"
#include "kvlab/method.h"

namespace kvlab {

// Core's families, one line each, in the order `kvlab methods` and the error lists show them.
// An explicit list: self-registering statics in a static library are dropped by the linker.
#define KVLAB_CORE_METHOD_FAMILIES(X) \
  X(fp16)                             \
  X(int8)                             \
  X(kivi)                             \
  X(kitty)                            \
  X(fp8)                              \
  X(fp4)                              \
  /* end of the list */

namespace methods {
#define KVLAB_DECLARE_FAMILY(name) MethodFamily name##_family();
KVLAB_CORE_METHOD_FAMILIES(KVLAB_DECLARE_FAMILY)
#undef KVLAB_DECLARE_FAMILY
}  // namespace methods

namespace {

struct Registry {
  std::mutex lock;
  std::vector<std::unique_ptr<const MethodFamily>> families;  // stable addresses

  void add(MethodFamily f) {
    std::lock_guard<std::mutex> g(lock);
    for (const auto& have : families) {
      if (have->name == f.name)
        throw std::invalid_argument("method family '" + f.name + "' is already registered");
      for (const Preset& p : have->presets)
        for (const Preset& q : f.presets)
          if (p.name == q.name)
            throw std::invalid_argument("method preset '" + q.name + "' is already registered by " +
                                        have->name);
    }
    families.push_back(std::make_unique<const MethodFamily>(std::move(f)));
  }
};

Registry& registry() {
  static Registry* r = [] {
    auto* reg = new Registry;  // never destroyed: methods may outlive static destruction order
#define KVLAB_ADD_FAMILY(name) reg->add(methods::name##_family());
    KVLAB_CORE_METHOD_FAMILIES(KVLAB_ADD_FAMILY)
#undef KVLAB_ADD_FAMILY
    return reg;
  }();
  return *r;
}

}  // namespace

void register_method_family(MethodFamily family) { registry().add(std::move(family)); }

std::vector<const MethodFamily*> method_families() {
  Registry& r = registry();
  std::lock_guard<std::mutex> g(r.lock);
  std::vector<const MethodFamily*> out;
  for (const auto& f : r.families) out.push_back(f.get());
  return out;
}

const MethodFamily* find_method_family(const std::string& name) {
  for (const MethodFamily* f : method_families())
    if (f->name == name) return f;
  return nullptr;
}

std::vector<Preset> presets() {
  std::vector<Preset> out;
  for (const MethodFamily* f : method_families()) out.insert(out.end(), f->presets.begin(), f->presets.end());
  return out;
}

MethodPtr parse_method(const std::string& text_in) {
  std::string text = text_in;
  const std::vector<const MethodFamily*> families = method_families();
  for (const MethodFamily* f : families)
    for (const Preset& p : f->presets)
      if (p.name == text) text = p.spec;
  const size_t colon = text.find(':');
  const MethodFamily* family = find_method_family(text.substr(0, colon));
  if (!family) {
    std::vector<std::string> names;
    for (const Preset& p : presets()) names.push_back(p.name);
    for (const MethodFamily* f : families)
      if (!f->keys.empty()) names.push_back(f->name + ":key=value,...");
    text::choose(text_in, "method", names);
    throw std::logic_error("preset '" + text_in + "' names no registered family");
  }
  return family->parse(colon == std::string::npos ? "" : text.substr(colon + 1));
}

bool operator==(const Method& a, const Method& b) { return a.family() == b.family() && a.spec() == b.spec(); }

}  // namespace kvlab
