#include "kvlab/selection.h"

#include <charconv>
#include <stdexcept>

namespace kvlab {

namespace {

// The whole string as a non-negative integer, else throw naming the option.
int64_t parse_count(const std::string& v, const std::string& option, const std::string& whole) {
  int64_t out = -1;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (v.empty() || ec != std::errc() || p != v.data() + v.size() || out < 0)
    throw std::invalid_argument(option + " '" + whole + "': '" + v + "' is not a non-negative integer");
  return out;
}

// " (valid: all, last:N, stride:N with N >= 1)": every mode but All takes N.
std::string valid_queries() {
  std::string list;
  for (const auto& n : EnumNames<QuerySelection::Mode>::names)
    list +=
        (list.empty() ? "" : ", ") + std::string(n.name) + (n.value == QuerySelection::Mode::All ? "" : ":N");
  return " (valid: " + list + " with N >= 1)";
}

}  // namespace

QuerySelection parse_queries(const std::string& text) {
  const size_t colon = text.find(':');
  const auto mode = find_enum<QuerySelection::Mode>(text.substr(0, colon));
  if (mode == QuerySelection::Mode::All && colon == std::string::npos) return {};
  if (!mode || *mode == QuerySelection::Mode::All)
    throw std::invalid_argument("--queries '" + text + "' is not valid" + valid_queries());
  QuerySelection q;
  q.mode = *mode;
  if (colon == std::string::npos)
    throw std::invalid_argument("--queries '" + text + "' needs N" + valid_queries());
  q.n = parse_count(text.substr(colon + 1), "--queries", text);
  if (q.n < 1) throw std::invalid_argument("--queries '" + text + "': N must be >= 1");
  return q;
}

std::string to_string(const QuerySelection& q) {
  const std::string mode = enum_name(q.mode);
  return q.mode == QuerySelection::Mode::All ? mode : mode + ":" + std::to_string(q.n);
}

std::vector<int64_t> select_queries(const QuerySelection& q, int64_t tokens) {
  if (tokens <= 0)
    throw std::invalid_argument("select_queries: the dump has no tokens (T = " + std::to_string(tokens) +
                                ")");
  if (q.mode != QuerySelection::Mode::All && (q.n < 1 || q.n > tokens))
    throw std::invalid_argument("--queries " + to_string(q) + ": N must be in [1, T] and the dump has T = " +
                                std::to_string(tokens) + " tokens");
  std::vector<int64_t> pos;
  switch (q.mode) {
    case QuerySelection::Mode::All:
      for (int64_t t = 0; t < tokens; ++t) pos.push_back(t);
      break;
    case QuerySelection::Mode::Last:
      for (int64_t t = tokens - q.n; t < tokens; ++t) pos.push_back(t);
      break;
    case QuerySelection::Mode::Stride:
      for (int64_t t = q.n - 1; t < tokens; t += q.n) pos.push_back(t);
      break;
  }
  return pos;
}

LayerRange parse_layers(const std::string& text) {
  if (!text.empty() && text[0] == '-')
    throw std::invalid_argument("--layers '" + text + "': layers are numbered from 0; write a or a-b");
  const size_t dash = text.find('-');
  LayerRange r;
  r.first = parse_count(text.substr(0, dash), "--layers", text);
  r.last = dash == std::string::npos ? r.first : parse_count(text.substr(dash + 1), "--layers", text);
  if (r.last < r.first)
    throw std::invalid_argument("--layers '" + text + "': the range is empty (write a-b with a <= b)");
  return r;
}

LayerRange resolve_layers(const LayerRange& r, int64_t num_layers) {
  LayerRange out = r;
  if (out.last < 0) out.last = num_layers - 1;
  if (out.first < 0 || out.first > out.last || out.last >= num_layers)
    throw std::invalid_argument("--layers " + std::to_string(r.first) + "-" + std::to_string(out.last) +
                                ": out of range; the dump has " + std::to_string(num_layers) + " layers (0-" +
                                std::to_string(num_layers - 1) + ")");
  return out;
}

std::vector<std::string> split_method_list(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(start, end - start);
    if (item.empty()) throw std::invalid_argument("--methods '" + text + "': empty method name");
    // key=value continues the method before; family:key=... starts one (a value may hold ':',
    // as calib=percentile:99.9 or calib=dump:PATH)
    const size_t eq = item.find('='), colon = item.find(':');
    const bool continues = eq != std::string::npos && (colon == std::string::npos || eq < colon);
    if (continues) {
      if (out.empty())
        throw std::invalid_argument("--methods '" + text + "': '" + item +
                                    "' is a parameter without a method");
      out.back() += "," + item;
    } else {
      out.push_back(item);
    }
    start = end + 1;
  }
  return out;
}

const std::vector<std::string>& default_eval_methods() {
  static const std::vector<std::string> m = {"fp16",        "int8",  "kivi-4",   "kivi-2",
                                             "kivi-2-sink", "kitty", "kitty-pro"};
  return m;
}

}  // namespace kvlab
