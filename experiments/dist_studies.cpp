// The rank drivers of dist_studies.h. Units are numbered in the single-process order (layer, KV
// head[, method]) and split into contiguous blocks (dist::unit_block); rank 0 knows every rank's
// block, so each message is checked against the units it must hold.
#include "dist_studies.h"

#include <chrono>
#include <stdexcept>

#include "kvlab/dist.h"
#include "kvlab/threads.h"
#include "kvlab/timing.h"
#include "kvlab/wire.h"

namespace kvlab::cli {
namespace {

using timing::Clock;
using timing::process_cpu;
using timing::since;

void expect_unit(int64_t got, int64_t want, int r, const char* study) {
  if (got != want)
    throw std::runtime_error(std::string(study) + ": rank " + std::to_string(r) + " sent unit " +
                             std::to_string(got) + " where unit " + std::to_string(want) + " belongs");
}

}  // namespace

void put_plan(dist::Writer& out, const EvalShape& shape, int64_t units) {
  const std::string& host = dist::world().host;
  out.put_vector(std::vector<char>(host.begin(), host.end()));
  out.put(shape);
  out.put(units);
}

void check_plan(dist::Reader& in, const EvalShape& shape, int64_t units, int rank, const std::string& study) {
  const std::vector<char> host = in.get_vector<char>();
  const EvalShape s = in.get<EvalShape>();
  const int64_t n = in.get<int64_t>();
  auto text = [](const EvalShape& x, int64_t u) {
    return "(layers " + std::to_string(x.num_layers) + ", q heads " + std::to_string(x.num_q_heads) +
           ", kv heads " + std::to_string(x.num_kv_heads) + ", head_dim " + std::to_string(x.head_dim) +
           ", tokens " + std::to_string(x.tokens) + "; " + std::to_string(u) + " units)";
  };
  if (s.num_layers != shape.num_layers || s.num_q_heads != shape.num_q_heads ||
      s.num_kv_heads != shape.num_kv_heads || s.head_dim != shape.head_dim || s.tokens != shape.tokens ||
      n != units)
    throw std::runtime_error(study + ": rank " + std::to_string(rank) + " on " +
                             std::string(host.begin(), host.end()) + " read the dump as " + text(s, n) +
                             ", rank 0 as " + text(shape, units) +
                             ": every rank must read the same dump (docs/SCALING.md)");
}

Tensor read_heads(const DumpReader& reader, int64_t layer, Role role, int64_t first, int64_t n) {
  Tensor out;
  for (int64_t h = first; h < first + n; ++h) {
    Tensor x = reader.read_head(layer, role, h);
    if (out.shape.empty()) out.shape = {0, x.shape[1], x.shape[2]};
    out.shape[0] += 1;
    out.data.insert(out.data.end(), x.data.begin(), x.data.end());
  }
  return out;
}

// Units (layer, KV head, method); a rank's consecutive units of one (layer, KV head) run as one
// eval_head call (one read, one reference pass).
EvalResult evaluate_ranks(const DumpReader& reader, const EvalShape& shape, const EvalOptions& opt) {
  const auto t0 = Clock::now();
  const double cpu0 = process_cpu();
  const dist::World& w = dist::world();
  EvalResult r = eval_plan(shape, opt);
  ScopedThreads threads(opt.threads);
  r.threads = threads.count();
  r.ranks = w.size;
  const bool pre_rope = shape.has_k_pre_rope && eval_needs_k_pre_rope(opt.methods);
  const int64_t M = r.methods.size(), H = shape.num_kv_heads, group = shape.num_q_heads / H;
  const int64_t units = (r.layers.last - r.layers.first + 1) * H * M;
  const auto [first, last] = dist::unit_block(units, w.rank, w.size);
  dist::Writer out;
  put_plan(out, shape, units);
  for (int64_t u = first; u < last;) {
    const int64_t layer = r.layers.first + u / (H * M), g = u / M % H, end = std::min(last, (u / M + 1) * M);
    std::vector<int> which;
    for (int64_t v = u; v < end; ++v) which.push_back((int)(v % M));
    HeadQKV x;
    {
      const auto tl = Clock::now();
      const double cl = process_cpu();
      x.q = read_heads(reader, layer, Role::Q, g * group, group);
      x.k = reader.read_head(layer, Role::K, g);
      x.v = reader.read_head(layer, Role::V, g);
      if (pre_rope) x.k_pre_rope = reader.read_head(layer, Role::KPreRope, g);
      r.times.load += since(tl);
      r.times.load_cpu += process_cpu() - cl;
    }
    eval_head(r, layer, g, which, std::move(x), opt);
    for (int mi : which) {
      const LayerEval& le = r.methods[mi].layers[layer - r.layers.first];
      out.put<int64_t>(u++);
      out.put(le.key[g]);
      out.put(le.value[g]);
      for (int64_t h = 0; h < group; ++h) out.put(le.attn[g * group + h]);
    }
  }
  r.times.total_cpu = process_cpu() - cpu0;
  out.put(r.times);
  const std::vector<std::string> parts = dist::gather_to_root(out.bytes());
  if (!w.root()) return r;
  // Wall seconds: the slowest rank's; CPU seconds: summed over ranks.
  EvalTimes sum;
  for (int k = 0; k < w.size; ++k) {
    dist::Reader in(parts[k], "eval: results of rank " + std::to_string(k));
    check_plan(in, shape, units, k, "eval");
    const auto [b, e] = dist::unit_block(units, k, w.size);
    for (int64_t u = b; u < e; ++u) {
      expect_unit(in.get<int64_t>(), u, k, "eval");
      const int64_t li = u / (H * M), g = u / M % H;
      LayerEval& le = r.methods[u % M].layers[li];
      le.key[g] = in.get<ReconStats>();
      le.value[g] = in.get<ReconStats>();
      for (int64_t h = 0; h < group; ++h) le.attn[g * group + h] = in.get<AttnStats>();
    }
    const EvalTimes t = in.get<EvalTimes>();
    sum.load = std::max(sum.load, t.load);
    sum.quantize = std::max(sum.quantize, t.quantize);
    sum.attention = std::max(sum.attention, t.attention);
    sum.load_cpu += t.load_cpu;
    sum.quantize_cpu += t.quantize_cpu;
    sum.attention_cpu += t.attention_cpu;
    sum.total_cpu += t.total_cpu;
    sum.cpu.merge(t.cpu);
  }
  eval_finish(r);
  r.times = sum;
  r.times.total = since(t0);
  return r;
}

// Units (layer, KV head).
SensitivityResult sensitivity_ranks(const DumpReader& reader, const EvalShape& shape,
                                    const SensitivityOptions& o) {
  const auto t0 = Clock::now();
  const dist::World& w = dist::world();
  SensitivityResult r = sensitivity_plan(shape, o);
  const std::vector<int64_t> positions = select_queries(o.queries, shape.tokens);
  const int64_t H = shape.num_kv_heads, group = shape.num_q_heads / H;
  const int64_t units = (r.layers.last - r.layers.first + 1) * H;
  const auto [first, last] = dist::unit_block(units, w.rank, w.size);
  dist::Writer out;
  put_plan(out, shape, units);
  double load = 0;
  for (int64_t u = first; u < last; ++u) {
    const int64_t layer = r.layers.first + u / H, g = u % H;
    const auto tl = Clock::now();
    const Tensor q = read_heads(reader, layer, Role::Q, g * group, group);
    const Tensor k = reader.read_head(layer, Role::K, g);
    load += since(tl);
    std::vector<SensitivityRow> rows;
    head_sensitivity(layer, g, q, k, positions, o, rows);
    out.put<int64_t>(u);
    out.put_vector(rows);
  }
  out.put(load);
  const std::vector<std::string> parts = dist::gather_to_root(out.bytes());
  if (!w.root()) return r;
  for (int k = 0; k < w.size; ++k) {
    dist::Reader in(parts[k], "sensitivity: results of rank " + std::to_string(k));
    check_plan(in, shape, units, k, "sensitivity");
    const auto [b, e] = dist::unit_block(units, k, w.size);
    for (int64_t u = b; u < e; ++u) {
      expect_unit(in.get<int64_t>(), u, k, "sensitivity");
      const std::vector<SensitivityRow> rows = in.get_vector<SensitivityRow>();
      r.rows.insert(r.rows.end(), rows.begin(), rows.end());
    }
    r.load_seconds = std::max(r.load_seconds, in.get<double>());
  }
  for (int64_t l = r.layers.first; l <= r.layers.last; ++l)
    for (const RankingRow& rr : rank_layer(r.rows, l, H, shape.head_dim)) r.rankings.push_back(rr);
  r.seconds = since(t0);
  return r;
}

// Units (layer, KV head); the stats merge into the rows unit by unit, query head by query head:
// for every row the order of boost_sweep (layer, then query head).
SweepResult sweep_ranks(const DumpReader& reader, const EvalShape& shape, const SweepOptions& o) {
  const auto t0 = Clock::now();
  const dist::World& w = dist::world();
  SweepPlan plan = sweep_plan(shape, o);
  SweepResult& r = plan.result;
  ScopedThreads threads(o.threads);
  const int64_t H = shape.num_kv_heads, group = shape.num_q_heads / H;
  const int64_t units = (r.layers.last - r.layers.first + 1) * H;
  const auto [first, last] = dist::unit_block(units, w.rank, w.size);
  dist::Writer out;
  put_plan(out, shape, units);
  for (int64_t u = first; u < last; ++u) {
    const int64_t layer = r.layers.first + u / H, g = u % H;
    LayerQKV x;
    x.q = read_heads(reader, layer, Role::Q, g * group, group);
    x.k = reader.read_head(layer, Role::K, g);
    x.v = reader.read_head(layer, Role::V, g);
    out.put<int64_t>(u);
    for (const std::vector<AttnStats>& row : sweep_heads(plan, x, g, o)) out.put_vector(row);
  }
  const std::vector<std::string> parts = dist::gather_to_root(out.bytes());
  if (!w.root()) return std::move(r);
  for (int k = 0; k < w.size; ++k) {
    dist::Reader in(parts[k], "boost-sweep: results of rank " + std::to_string(k));
    check_plan(in, shape, units, k, "boost-sweep");
    const auto [b, e] = dist::unit_block(units, k, w.size);
    for (int64_t u = b; u < e; ++u) {
      expect_unit(in.get<int64_t>(), u, k, "boost-sweep");
      for (SweepRow& row : r.rows) {
        const std::vector<AttnStats> heads = in.get_vector<AttnStats>();
        if ((int64_t)heads.size() != group)
          throw std::runtime_error("boost-sweep: rank " + std::to_string(k) + " sent " +
                                   std::to_string(heads.size()) + " query heads for unit " +
                                   std::to_string(u));
        for (const AttnStats& a : heads) row.attn.merge(a);
      }
    }
  }
  r.summary = summarize(r.rows);
  r.seconds = since(t0);
  return std::move(r);
}

}  // namespace kvlab::cli
