// EvalResult as CSV: one row per method, per layer and per query head.
#include "kvlab/eval_report.h"
#include "report_fields.h"

namespace kvlab {

namespace {

std::string csv_text(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

void row(std::ostream& o, const MethodEval& m, const std::string& layer, const std::string& q_head,
         const std::string& kv_head, const detail::Fields& f) {
  o << csv_text(m.name) << ',' << csv_text(m.spec) << ',' << layer << ',' << q_head << ',' << kv_head;
  for (const auto& kv : f) {
    const std::string v = detail::json_number(kv.second);
    o << ',' << (v == "null" ? "" : v);  // empty cell for NaN
  }
  o << '\n';
}

}  // namespace

void write_eval_csv(std::ostream& o, const EvalResult& r) {
  o << "method,spec,layer,q_head,kv_head";
  for (const auto& kv : detail::metric_fields({}, {}, {}, {})) o << ',' << kv.first;
  o << '\n';
  const int64_t group = r.shape.num_q_heads / r.shape.num_kv_heads;
  for (const MethodEval* m : methods_by_bits(r)) {
    row(o, *m, "all", "all", "all", detail::metric_fields(m->bits, m->key, m->value, m->attn));
    for (const LayerEval& le : m->layers) {
      const std::string layer = std::to_string(le.layer);
      row(o, *m, layer, "all", "all",
          detail::metric_fields(m->bits, le.key_total(), le.value_total(), le.attn_total()));
      for (size_t h = 0; h < le.attn.size(); ++h) {
        const int64_t g = (int64_t)h / group;
        row(o, *m, layer, std::to_string(h), std::to_string(g),
            detail::metric_fields(m->bits, le.key[g], le.value[g], le.attn[h]));
      }
    }
  }
}

}  // namespace kvlab
