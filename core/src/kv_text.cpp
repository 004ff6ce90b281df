#include "kvlab/kv_text.h"

#include <charconv>
#include <stdexcept>

namespace kvlab::text {

std::vector<std::pair<std::string, std::string>> split_pairs(const std::string& s, const std::string& what) {
  std::vector<std::pair<std::string, std::string>> out;
  if (s.empty()) return out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(',', start);
    if (end == std::string::npos) end = s.size();
    const std::string item = s.substr(start, end - start);
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == item.size())
      throw std::invalid_argument(what + " '" + s + "': item '" + item + "' is not of the form key=value");
    const std::string key = item.substr(0, eq);
    for (const auto& [k, v] : out)
      if (k == key) throw std::invalid_argument(what + " '" + s + "': key '" + key + "' is given twice");
    out.emplace_back(key, item.substr(eq + 1));
    start = end + 1;
  }
  return out;
}

int parse_int(const std::string& v, const std::string& key) {
  int out = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc() || p != v.data() + v.size())
    throw std::invalid_argument(key + "='" + v + "' is not an integer");
  return out;
}

double parse_double(const std::string& v, const std::string& key) {
  double out = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc() || p != v.data() + v.size())
    throw std::invalid_argument(key + "='" + v + "' is not a number");
  return out;
}

int64_t parse_count(const std::string& v, const std::string& key) {
  int64_t out = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (!v.empty() && v[0] == '-' && ec == std::errc() && p == v.data() + v.size())
    throw std::invalid_argument(key + "='" + v + "' is negative");
  if (ec == std::errc::result_out_of_range) throw std::invalid_argument(key + "='" + v + "' is too large");
  if (v.empty() || ec != std::errc() || p != v.data() + v.size())
    throw std::invalid_argument(key + "='" + v + "' is not a non-negative integer");
  return out;
}

std::string format_double(double v) {
  char buf[64];
  auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, p);
}

int choose(const std::string& v, const std::string& key, const std::vector<std::string>& choices) {
  for (size_t i = 0; i < choices.size(); ++i)
    if (choices[i] == v) return (int)i;
  std::string list;
  for (const auto& c : choices) list += (list.empty() ? "" : ", ") + c;
  throw std::invalid_argument(key + "='" + v + "' is not valid; choose one of: " + list);
}

}  // namespace kvlab::text
