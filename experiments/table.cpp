#include <algorithm>
#include <cstdio>

#include "common.h"

namespace kvlab::cli {

void print_table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> w;
  for (const auto& r : rows)
    for (size_t i = 0; i < r.size(); ++i) {
      if (w.size() <= i) w.push_back(0);
      w[i] = std::max(w[i], r[i].size());
    }
  for (size_t j = 0; j < rows.size(); ++j) {
    std::string line;
    for (size_t i = 0; i < rows[j].size(); ++i) {
      const auto& c = rows[j][i];
      const bool left = i == 0 || rows[0][i] == "description";
      const std::string pad(w[i] - c.size(), ' ');
      line += (i ? "  " : "") + (left ? c + pad : pad + c);
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    std::printf("%s\n", line.c_str());
    if (j == 0) {
      size_t total = 0;
      for (size_t x : w) total += x + 2;
      std::printf("%s\n", std::string(total - 2, '-').c_str());
    }
  }
}

std::string fixed(double v, int digits) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", digits, v);
  return b;
}

std::string sci(double v, int digits) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*e", digits, v);
  return b;
}

}  // namespace kvlab::cli
