#include "kvlab/method_registry.h"

#include <map>

namespace kvlab {
namespace {
std::map<std::string, CustomMethodFactory>& registry() {
  static std::map<std::string, CustomMethodFactory> r;  // built before main, read after
  return r;
}
}  // namespace

int register_method_family(const std::string& family, CustomMethodFactory factory) {
  registry()[family] = std::move(factory);
  return 0;
}

const CustomMethodFactory* find_method_family(const std::string& text, std::string* args) {
  const auto colon = text.find(':');
  const auto it = registry().find(text.substr(0, colon));
  if (it == registry().end()) return nullptr;
  if (args) *args = colon == std::string::npos ? "" : text.substr(colon + 1);
  return &it->second;
}

std::vector<std::string> custom_method_families() {
  std::vector<std::string> out;
  for (const auto& [name, f] : registry()) out.push_back(name);
  return out;
}

}  // namespace kvlab
