// Studies over a dump: eval (the JSON of `kvlab eval --format json`, from its own writer),
// channel sensitivity and the Kitty boost sweep (the columns of their CSV files). Each runs
// with the GIL released, reports progress per layer and stops at Ctrl-C.
#include <sstream>

#include "common.h"
#include "dumps.h"
#include "kvlab/boost_sweep.h"
#include "kvlab/eval_report.h"
#include "kvlab/half.h"
#include "kvlab/sensitivity.h"

namespace kvlab::bind {
namespace {

EvalShape shape_of(const DumpInfo& i) {
  return {i.num_layers, i.num_q_heads, i.num_kv_heads,      i.head_dim,
          i.tokens,     i.rope_style,  (float)i.rope_theta, i.has_k_pre_rope};
}

// pre_rope: also read k_pre_rope (eval of a method that quantizes keys before RoPE).
LayerLoader loader(const PyDump& d, const LongCall& call, bool pre_rope = false) {
  return [&d, &call, pre_rope](int64_t layer) {
    call.check();
    LayerQKV x;
    x.q = d.reader->read(layer, Role::Q);
    x.k = d.reader->read(layer, Role::K);
    x.v = d.reader->read(layer, Role::V);
    if (pre_rope && d.reader->info().has_k_pre_rope) x.k_pre_rope = d.reader->read(layer, Role::KPreRope);
    return x;
  };
}

// A dump over caller-held arrays q (L, Hq, T, D), k and v (L, Hkv, T, D), fp16 or fp32,
// read in place: read() converts one layer to fp32.
class ArrayDump final : public DumpReader {
 public:
  ArrayDump(py::handle q, py::handle k, py::handle v, const std::string& model)
      : q_(input_array(q, "q")), k_(input_array(k, "k")), v_(input_array(v, "v")) {
    const auto& s = q_.view.shape;
    if (s.size() != 4)
      throw std::invalid_argument("q: shape " + shape_string(s) + " is not (layers, q heads, T, D)");
    const auto& ks = k_.view.shape;
    if (ks.size() != 4 || ks[0] != s[0] || ks[2] != s[2] || ks[3] != s[3] || v_.view.shape != ks)
      throw std::invalid_argument("k " + shape_string(ks) + " and v " + shape_string(v_.view.shape) +
                                  " must both be (layers, kv heads, T, D) with the layers, T and D of q " +
                                  shape_string(s));
    info_.model = model;
    info_.num_layers = s[0];
    info_.num_q_heads = s[1];
    info_.num_kv_heads = ks[1];
    info_.head_dim = s[3];
    info_.tokens = s[2];
    info_.rope_style = RopeStyle::None;
    info_.validate("arrays");
  }
  const DumpInfo& info() const override { return info_; }
  const std::string& path() const override { return path_; }
  Tensor read(int64_t layer, Role role) const override {
    check_request(layer, role, 0);
    const TensorView& x = role == Role::Q ? q_.view : role == Role::K ? k_.view : v_.view;
    Tensor t{{x.shape[1], x.shape[2], x.shape[3]}, {}};
    const int64_t n = numel(t.shape), at = layer * n;
    t.data.resize(n);
    if (x.dtype == DType::F32)
      std::copy_n(static_cast<const float*>(x.data) + at, n, t.data.begin());
    else
      for (int64_t i = 0; i < n; ++i) t.data[i] = half_to_float(static_cast<const uint16_t*>(x.data)[at + i]);
    check_finite(t.view(), "arrays: layer " + std::to_string(layer) + " " + to_string(role));
    return t;
  }

 private:
  InputArray q_, k_, v_;
  DumpInfo info_;
  std::string path_ = "<arrays>";
};

py::dict sensitivity_dict(const SensitivityResult& r) {
  const size_t n = r.rows.size();
  auto column = [n](auto get) {
    py::list out(n);
    for (size_t i = 0; i < n; ++i) out[i] = get(i);
    return out;
  };
  py::dict rows;
  rows["layer"] = column([&](size_t i) { return r.rows[i].layer; });
  rows["kv_head"] = column([&](size_t i) { return r.rows[i].kv_head; });
  rows["q_head"] = column([&](size_t i) { return r.rows[i].q_head; });
  rows["channel"] = column([&](size_t i) { return r.rows[i].channel; });
  rows["attn_score_mse"] = column([&](size_t i) { return r.rows[i].attn_score_mse; });
  rows["mean_abs"] = column([&](size_t i) { return r.rows[i].stats.mean_abs; });
  rows["max_abs"] = column([&](size_t i) { return r.rows[i].stats.max_abs; });
  rows["variance"] = column([&](size_t i) { return r.rows[i].stats.variance; });
  py::list ranking;
  const char* names[] = {"d16", "d8", "d4"};
  for (const RankingRow& x : r.rankings) {
    py::dict d;
    d["layer"] = x.layer;
    d["kv_head"] = x.kv_head;
    d["spearman"] = x.spearman;
    for (size_t i = 0; i < x.ks.size() && i < 3; ++i) {
      d[("k_" + std::string(names[i])).c_str()] = x.ks[i];
      d[("recall_" + std::string(names[i])).c_str()] = x.recall[i];
    }
    ranking.append(d);
  }
  py::dict out;
  out["rows"] = rows;
  out["ranking"] = ranking;
  out["layers"] = py::make_tuple(r.layers.first, r.layers.last);
  out["num_queries"] = r.num_queries;
  out["key_range"] = py::make_tuple(r.key_begin, r.key_end);
  out["seconds"] = r.seconds;
  return out;
}

py::dict sweep_dict(const SweepResult& r) {
  py::list rows, summary;
  for (const SweepRow& x : r.rows) {
    py::dict d;
    d["selector"] = to_string(x.selector);
    d["rate"] = x.rate;
    d["seed"] = x.seed < 0 ? py::object(py::none()) : py::object(py::int_(x.seed));
    d["boost_k"] = x.boost_k;
    d["attn_score_mse"] = x.attn.score_mse();
    d["attn_output_rel_err"] = x.attn.out_rel_err();
    d["kl"] = x.attn.kl();
    d["topk_overlap"] = x.attn.topk_overlap();
    d["bits_per_element"] = x.bits.both();
    d["key_bits"] = x.bits.key;
    rows.append(d);
  }
  for (const SweepSummary& s : r.summary) {
    py::dict d;
    d["selector"] = to_string(s.selector);
    d["rate"] = s.rate;
    d["boost_k"] = s.boost_k;
    d["runs"] = s.runs;
    d["attn_score_mse_mean"] = s.score_mse_mean;
    d["attn_score_mse_std"] = s.score_mse_std;
    d["attn_score_mse_min"] = s.score_mse_min;
    d["attn_score_mse_max"] = s.score_mse_max;
    d["attn_output_rel_err_mean"] = s.out_err_mean;
    d["attn_output_rel_err_std"] = s.out_err_std;
    d["bits_per_element"] = s.bits;
    summary.append(d);
  }
  py::dict out;
  out["method"] = r.method;
  out["rows"] = rows;
  out["summary"] = summary;
  out["layers"] = py::make_tuple(r.layers.first, r.layers.last);
  out["calib_tokens"] = r.calib_tokens;
  out["num_queries"] = r.num_queries;
  out["first_query"] = r.first_query;
  out["seconds"] = r.seconds;
  return out;
}

// Eval reads k_pre_rope when one of its methods quantizes keys before RoPE; the studies never.
bool wants_pre_rope(const EvalOptions& o) { return eval_needs_k_pre_rope(o.methods); }
template <class Options>
bool wants_pre_rope(const Options&) {
  return false;
}

// Runs one study over the dump's layers with the GIL released: progress goes to `progress`, and
// Ctrl-C stops it between layers (LongCall).
template <class Options, class Study>
auto run_study(const PyDump& d, Options& o, py::object progress, Study study) {
  LongCall call(progress);
  o.progress = call.hook();
  const LayerLoader load = loader(d, call, wants_pre_rope(o));
  py::gil_scoped_release release;
  return study(shape_of(d.reader->info()), load, o);
}

}  // namespace

void bind_studies(py::module_& m) {
  m.def(
      "arrays_dump",
      [](py::handle q, py::handle k, py::handle v, const std::string& model) {
        return std::make_shared<PyDump>(PyDump{std::make_unique<ArrayDump>(q, k, v, model)});
      },
      py::arg("q"), py::arg("k"), py::arg("v"), py::arg("model") = "arrays", py::keep_alive<0, 1>(),
      py::keep_alive<0, 2>(), py::keep_alive<0, 3>());

  m.def(
      "evaluate_json",
      [](const PyDump& d, const std::vector<std::string>& methods, const std::string& queries,
         const std::string& layers, int threads, int64_t query_tile, int64_t key_tile, py::object progress) {
        EvalOptions o;
        for (const auto& item : methods)
          for (auto& x : split_method_list(item)) o.methods.push_back(x);
        o.queries = parse_queries(queries);
        if (!layers.empty()) o.layers = parse_layers(layers);
        o.threads = threads;
        o.tiles = {query_tile, key_tile};
        const EvalResult r = run_study(
            d, o, progress,
            [](const auto& shape, const auto& load, const auto& opt) { return evaluate(shape, load, opt); });
        std::ostringstream os;
        os.precision(17);
        write_eval_json(os, r, {d.reader->path(), d.reader->info().model});
        return os.str();
      },
      py::arg("dump"), py::arg("methods"), py::arg("queries"), py::arg("layers"), py::arg("threads"),
      py::arg("query_tile"), py::arg("key_tile"), py::arg("progress"));

  m.def(
      "sensitivity",
      [](const PyDump& d, int bits, int group, int sink, const std::string& params,
         const std::string& profile, const std::string& queries, const std::string& layers, int threads,
         bool naive, py::object progress) {
        SensitivityOptions o;
        o.bits = bits;
        o.group = group;
        o.sink = sink;
        o.params = parse_enum<ParamType>(params, "params");
        o.profile = parse_enum<Profile>(profile, "profile");
        o.queries = parse_queries(queries);
        if (!layers.empty()) o.layers = parse_layers(layers);
        o.threads = threads;
        o.naive = naive;
        return sensitivity_dict(
            run_study(d, o, progress, [](const auto& shape, const auto& load, const auto& opt) {
              return channel_sensitivity(shape, load, opt);
            }));
      },
      py::arg("dump"), py::arg("bits"), py::arg("group"), py::arg("sink"), py::arg("params"),
      py::arg("profile"), py::arg("queries"), py::arg("layers"), py::arg("threads"), py::arg("naive"),
      py::arg("progress"));

  m.def(
      "boost_sweep",
      [](const PyDump& d, const std::string& method, const std::vector<double>& rates,
         const std::vector<std::string>& selectors, int seeds, int64_t calib_tokens, int64_t calib_queries,
         const std::string& queries, const std::string& layers, int threads, py::object progress) {
        SweepOptions o;
        o.method = method;
        o.rates = rates;
        o.selectors.clear();
        for (const auto& s : selectors) o.selectors.push_back(parse_selector(s));
        o.seeds = seeds;
        o.calib_tokens = calib_tokens;
        o.calib_queries = calib_queries;
        if (!queries.empty()) o.queries = parse_queries(queries);
        if (!layers.empty()) o.layers = parse_layers(layers);
        o.threads = threads;
        return sweep_dict(run_study(d, o, progress, [](const auto& shape, const auto& load, const auto& opt) {
          return boost_sweep(shape, load, opt);
        }));
      },
      py::arg("dump"), py::arg("method"), py::arg("rates"), py::arg("selectors"), py::arg("seeds"),
      py::arg("calib_tokens"), py::arg("calib_queries"), py::arg("queries"), py::arg("layers"),
      py::arg("threads"), py::arg("progress"));
}

}  // namespace kvlab::bind
