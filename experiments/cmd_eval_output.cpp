#include "cmd_eval_output.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "common.h"

namespace kvlab::cli {

std::string eval_table(const EvalResult& r, const ReportSource& src) {
  std::vector<std::vector<std::string>> rows = {{"method", "bits/elem", "K bits", "V bits", "K mse",
                                                 "K max|err|", "V mse", "V max|err|", "score mse",
                                                 "out rel err", "KL", "top-8"}};
  for (const MethodEval* m : methods_by_bits(r)) {
    const double rel = m->attn.out_rel_err();
    rows.push_back({m->name, fixed(m->bits.both(), 3), fixed(m->bits.key, 3), fixed(m->bits.value, 3),
                    sci(m->key.mse()), sci(m->key.max_abs), sci(m->value.mse()), sci(m->value.max_abs),
                    sci(m->attn.score_mse()), rel == rel ? sci(rel) : "n/a", sci(m->attn.kl()),
                    fixed(m->attn.topk_overlap(), 4)});
  }
  // Laid out as print_table does, but into a string: the table may go to --out.
  std::vector<size_t> w(rows[0].size(), 0);
  for (const auto& row : rows)
    for (size_t i = 0; i < row.size(); ++i) w[i] = std::max(w[i], row[i].size());
  std::string out;
  for (size_t j = 0; j < rows.size(); ++j) {
    std::string line;
    for (size_t i = 0; i < rows[j].size(); ++i) {
      const std::string pad(w[i] - rows[j][i].size(), ' ');
      line += (i ? "  " : "") + (i == 0 ? rows[j][i] + pad : pad + rows[j][i]);
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
    if (j == 0) {
      size_t total = 0;
      for (size_t x : w) total += x + 2;
      out += std::string(total - 2, '-') + "\n";
    }
  }
  const auto& s = r.shape;
  const auto& t = r.times;
  char foot[1024];
  std::snprintf(foot, sizeof foot,
                "\ndump: %s (%s): layers %lld-%lld of %lld, %lld q / %lld kv heads, D %lld, T %lld\n"
                "queries: %s (%lld per head); errors K/V over quantized positions, attention over all causal "
                "entries (docs/EVAL_JSON.md)\n"
                "time: %.2f s (load %.2f, quantize %.2f, attention %.2f) on %d threads; CPU %.2f s\n",
                src.path.c_str(), src.model.c_str(), (long long)r.layers.first, (long long)r.layers.last,
                (long long)s.num_layers, (long long)s.num_q_heads, (long long)s.num_kv_heads,
                (long long)s.head_dim, (long long)s.tokens, to_string(r.queries).c_str(),
                (long long)r.num_queries, t.total, t.load, t.quantize, t.attention, r.threads, t.total_cpu);
  out += foot;
  for (const MethodEval* m : methods_by_bits(r))  // learned methods say what they learned from
    if (!m->calibration.empty()) out += "calibration of " + m->name + ": " + m->calibration + "\n";
  return out;
}

}  // namespace kvlab::cli
