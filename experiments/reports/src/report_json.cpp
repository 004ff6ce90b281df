// EvalResult as JSON, written by hand: a few dozen keys, strings escaped per RFC 8259.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "kvlab/eval_report.h"
#include "report_fields.h"

namespace kvlab {

namespace detail {

std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, p);
}

}  // namespace detail

namespace {

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          out += b;
        } else {
          out += (char)c;  // UTF-8 passes through unchanged
        }
    }
  }
  return out + "\"";
}

std::string fields(const detail::Fields& f) {
  std::string out;
  for (const auto& [k, v] : f) out += ", " + quote(k) + ": " + detail::json_number(v);
  return out;
}

std::string num(int64_t v) { return std::to_string(v); }

}  // namespace

std::vector<const MethodEval*> methods_by_bits(const EvalResult& r) {
  std::vector<const MethodEval*> out;
  for (const auto& m : r.methods) out.push_back(&m);
  std::stable_sort(out.begin(), out.end(),
                   [](const MethodEval* a, const MethodEval* b) { return a->bits.both() < b->bits.both(); });
  return out;
}

void write_eval_json(std::ostream& o, const EvalResult& r, const ReportSource& src) {
  const auto& s = r.shape;
  const auto& t = r.times;
  const int64_t group = s.num_q_heads / s.num_kv_heads;
  o << "{\n  \"schema\": \"kvlab-eval/1\",\n";
  o << "  \"dump\": {\"path\": " << quote(src.path) << ", \"model\": " << quote(src.model)
    << ", \"num_layers\": " << s.num_layers << ", \"num_q_heads\": " << s.num_q_heads
    << ", \"num_kv_heads\": " << s.num_kv_heads << ", \"head_dim\": " << s.head_dim
    << ", \"tokens\": " << s.tokens << "},\n";
  o << "  \"queries\": {\"selection\": " << quote(to_string(r.queries)) << ", \"count\": " << r.num_queries
    << "},\n";
  o << "  \"layer_range\": [" << r.layers.first << ", " << r.layers.last << "],\n";
  o << "  \"tiles\": {\"query\": " << r.tiles.query_tile << ", \"key\": " << r.tiles.key_tile << "},\n";
  o << "  \"threads\": " << r.threads << ",\n";
  o << "  \"timing_s\": {\"total\": " << detail::json_number(t.total)
    << ", \"load\": " << detail::json_number(t.load) << ", \"quantize\": " << detail::json_number(t.quantize)
    << ", \"attention\": " << detail::json_number(t.attention)
    << ", \"cpu\": {\"total\": " << detail::json_number(t.total_cpu)
    << ", \"load\": " << detail::json_number(t.load_cpu)
    << ", \"quantize\": " << detail::json_number(t.quantize_cpu)
    << ", \"attention\": " << detail::json_number(t.attention_cpu) << "}"
    << ", \"attention_cpu\": {\"gemm_qk\": " << detail::json_number(t.cpu.gemm_qk)
    << ", \"gemm_pv\": " << detail::json_number(t.cpu.gemm_pv)
    << ", \"softmax\": " << detail::json_number(t.cpu.softmax)
    << ", \"metrics\": " << detail::json_number(t.cpu.metrics)
    << ", \"topk\": " << detail::json_number(t.cpu.topk) << "}},\n";
  o << "  \"methods\": [";
  bool first_method = true;
  for (const MethodEval* m : methods_by_bits(r)) {
    o << (first_method ? "\n" : ",\n");
    first_method = false;
    const Schedule& sc = m->schedule;
    o << "    {\"name\": " << quote(m->name) << ", \"spec\": " << quote(m->spec)
      << ", \"calibration\": " << quote(m->calibration)
      << fields(detail::metric_fields(m->bits, m->key, m->value, m->attn)) << ",\n";
    o << "     \"schedule\": {\"key_begin\": " << num(sc.key_begin) << ", \"key_end\": " << num(sc.key_end)
      << ", \"value_begin\": " << num(sc.value_begin) << ", \"value_end\": " << num(sc.value_end) << "},\n";
    o << "     \"layers\": [";
    for (size_t li = 0; li < m->layers.size(); ++li) {
      const LayerEval& le = m->layers[li];
      o << (li ? ",\n" : "\n") << "      {\"layer\": " << le.layer
        << fields(detail::metric_fields(m->bits, le.key_total(), le.value_total(), le.attn_total()))
        << ",\n       \"heads\": [";
      for (size_t h = 0; h < le.attn.size(); ++h) {
        const int64_t g = (int64_t)h / group;
        o << (h ? ",\n" : "\n") << "        {\"q_head\": " << h << ", \"kv_head\": " << g
          << fields(detail::metric_fields(m->bits, le.key[g], le.value[g], le.attn[h])) << "}";
      }
      o << "]}";
    }
    o << "]}";
  }
  o << "\n  ]\n}\n";
}

}  // namespace kvlab
