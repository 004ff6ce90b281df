// The subcommand registry behind KVLAB_COMMAND.
#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "common.h"

namespace kvlab::cli {

static std::vector<std::pair<int, AddCommand>>& registry() {
  static std::vector<std::pair<int, AddCommand>> commands;  // built before main() runs
  return commands;
}

int register_command(int order, AddCommand add) {
  registry().emplace_back(order, add);
  return order;
}

void add_all_commands(CLI::App& app) {
  auto commands = registry();
  std::sort(commands.begin(), commands.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t i = 1; i < commands.size(); ++i)
    if (commands[i].first == commands[i - 1].first)
      throw std::logic_error("two kvlab commands share the order key " + std::to_string(commands[i].first));
  for (const auto& [order, add] : commands) add(app);
}

}  // namespace kvlab::cli
