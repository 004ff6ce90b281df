// PplResult as JSON, CSV and a text table; one list of fields for all three.
#include <algorithm>
#include <cstdio>
#include <utility>
#include <vector>

#include "kvlab/ppl_report.h"
#include "report_fields.h"

namespace kvlab {
namespace {

detail::Fields stats_fields(const PplStats& s, double delta_ppl) {
  return {{"ppl", s.ppl},
          {"delta_ppl", delta_ppl},
          {"kl_mean", s.kl_mean},
          {"kl_max", s.kl_max},
          {"top1_agreement", s.top1_agreement},
          {"greedy_divergence", s.greedy_divergence}};
}

std::string quote(const std::string& s) {  // names, specs and paths: no control characters expected
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if ((unsigned char)c < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", (unsigned char)c);
      out += b;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string json_fields(const detail::Fields& f) {
  std::string out;
  for (const auto& [k, v] : f) out += ", " + quote(k) + ": " + detail::json_number(v);
  return out;
}

// The reference as a method row: fp16, 16 bits, its own numbers.
PplMethodResult reference_row(const PplResult& r) {
  PplMethodResult m;
  m.name = m.spec = "fp16";
  m.bits_per_element = 16;
  m.all = r.reference;
  m.all.top1_agreement = 1;
  m.all.greedy_divergence = (double)r.generate_tokens;
  m.per_window = r.reference_windows;
  for (PplStats& s : m.per_window) {
    s.top1_agreement = 1;
    s.greedy_divergence = (double)r.generate_tokens;
  }
  return m;
}

std::vector<PplMethodResult> rows(const PplResult& r) {
  std::vector<PplMethodResult> out = {reference_row(r)};
  out.insert(out.end(), r.methods.begin(), r.methods.end());
  return out;
}

std::string csv_text(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

std::string layers_text(const std::vector<int64_t>& l) {
  std::string s;
  for (int64_t x : l) {
    if (!s.empty()) s += ',';
    s += std::to_string(x);
  }
  return s;
}

}  // namespace

void write_ppl_json(std::ostream& out, const PplResult& r, const PplSource& src) {
  out << "{\"command\": \"ppl\", \"model\": " << quote(src.model) << ", \"text\": " << quote(src.text)
      << ", \"window\": " << r.window << ", \"windows\": " << r.windows
      << ", \"prompt_tokens\": " << r.prompt_tokens << ", \"generate_tokens\": " << r.generate_tokens
      << ", \"quantized_layers\": [" << layers_text(r.quantized_layers)
      << "], \"seconds\": " << detail::json_number(src.seconds) << ",\n \"methods\": [";
  const std::vector<PplMethodResult> all = rows(r);
  for (size_t i = 0; i < all.size(); ++i) {
    const PplMethodResult& m = all[i];
    const double ref = r.reference.ppl;
    out << (i ? ",\n  " : "\n  ") << "{\"name\": " << quote(m.name) << ", \"spec\": " << quote(m.spec)
        << ", \"bits_per_element\": " << detail::json_number(m.bits_per_element)
        << (m.calibration.empty() ? "" : ", \"calibration\": " + quote(m.calibration))
        << json_fields(stats_fields(m.all, m.all.ppl - ref)) << ", \"windows\": [";
    for (size_t w = 0; w < m.per_window.size(); ++w) {
      const PplStats& s = m.per_window[w];
      out << (w ? ", " : "") << "{\"first_token\": " << (int64_t)w * r.window
          << json_fields(stats_fields(s, s.ppl - r.reference_windows[w].ppl)) << "}";
    }
    out << "]}";
  }
  out << "\n]}\n";
}

void write_ppl_csv(std::ostream& out, const PplResult& r) {
  out << "name,spec,bits_per_element,window";
  for (const auto& [k, v] : stats_fields({}, 0)) out << "," << k;
  out << "\n";
  for (const PplMethodResult& m : rows(r)) {
    auto row = [&](const std::string& window, const PplStats& s, double ref) {
      out << csv_text(m.name) << "," << csv_text(m.spec) << "," << detail::json_number(m.bits_per_element)
          << "," << window;
      for (const auto& [k, v] : stats_fields(s, s.ppl - ref)) out << "," << detail::json_number(v);
      out << "\n";
    };
    row("all", m.all, r.reference.ppl);
    for (size_t w = 0; w < m.per_window.size(); ++w)
      row(std::to_string(w), m.per_window[w], r.reference_windows[w].ppl);
  }
}

std::string ppl_table(const PplResult& r, const PplSource& src) {
  std::vector<std::vector<std::string>> t = {
      {"method", "bits", "ppl", "dPPL", "KL mean", "KL max", "top-1", "greedy div"}};
  auto f = [](const char* fmt, double v) {
    char b[48];
    std::snprintf(b, sizeof b, fmt, v);
    return std::string(b);
  };
  for (const PplMethodResult& m : rows(r))
    t.push_back({m.name, f("%.2f", m.bits_per_element), f("%.4f", m.all.ppl),
                 f("%+.4f", m.all.ppl - r.reference.ppl), f("%.3e", m.all.kl_mean), f("%.3e", m.all.kl_max),
                 f("%.4f", m.all.top1_agreement), f("%.1f", m.all.greedy_divergence)});
  std::vector<size_t> w(t[0].size(), 0);
  for (const auto& row : t)
    for (size_t i = 0; i < row.size(); ++i) w[i] = std::max(w[i], row[i].size());
  std::string out;
  for (size_t j = 0; j < t.size(); ++j) {
    for (size_t i = 0; i < t[j].size(); ++i) {
      const std::string pad(w[i] - t[j][i].size(), ' ');
      out += (i ? "  " : "") + (i == 0 ? t[j][i] + pad : pad + t[j][i]);
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    out += "\n";
    if (j == 0) {
      size_t total = 0;
      for (size_t x : w) total += x + 2;
      out += std::string(total - 2, '-') + "\n";
    }
  }
  char foot[512];
  std::snprintf(
      foot, sizeof foot,
      "model %s, text %s: %lld window(s) of %lld tokens, quantized layers %s; greedy: %lld prompt + "
      "%lld generated tokens (div = first differing generated token, %lld = none); %.1f s\n",
      src.model.c_str(), src.text.c_str(), (long long)r.windows, (long long)r.window,
      layers_text(r.quantized_layers).c_str(), (long long)r.prompt_tokens, (long long)r.generate_tokens,
      (long long)r.generate_tokens, src.seconds);
  out += foot;
  for (const PplMethodResult& m : r.methods)  // learned methods say from what, as kvlab eval does
    if (!m.calibration.empty()) out += "calibration of " + m.name + ": " + m.calibration + "\n";
  return out;
}

}  // namespace kvlab
