// The `plan` method family: plan:file=PLAN.json rebuilds each layer with the method the plan
// chose for it, or each KV head of a layer with its own in a per-head plan (kvlab/plan.h).
#include <algorithm>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "kvlab/kv_text.h"
#include "kvlab/method.h"
#include "kvlab/plan.h"

namespace kvlab {
namespace {

const std::string kName = "plan";
const std::string kKey = "file=";

// One layer of a per-head plan whose KV heads use different methods: apply() dispatches on
// HeadContext::kv_head; bits are the mean over heads (each head holds as many elements). A
// layer whose heads agree holds that method itself instead.
class HeadsMethod final : public Method {
 public:
  HeadsMethod(std::string spec, std::vector<MethodPtr> heads)
      : spec_(std::move(spec)), heads_(std::move(heads)) {}
  const std::string& family() const override { return kName; }
  std::string spec() const override { return spec_; }
  Schedule schedule(int64_t T) const override {
    return intersect(heads_, [T](const Method& m) { return m.schedule(T); });
  }
  Bits bits(int64_t T, int64_t D) const override { return mean_bits(heads_, T, D); }
  Reconstruction apply(const TensorView& k, const TensorView& v, const HeadContext& at) const override {
    if (at.kv_head < 0 || at.kv_head >= (int64_t)heads_.size())
      throw std::invalid_argument(spec_ + " has no KV head " + std::to_string(at.kv_head));
    return heads_[at.kv_head]->apply(k, v, at);
  }
  void check_model(const ModelShape& s) const override {
    for (const MethodPtr& m : heads_) m->check_model(s);
  }
  std::vector<std::string> files() const override {
    std::vector<std::string> f;
    for (const MethodPtr& m : heads_)
      for (const std::string& x : m->files()) f.push_back(x);
    return f;
  }
  bool needs_k_pre_rope() const override {
    for (const MethodPtr& m : heads_)
      if (m->needs_k_pre_rope()) return true;
    return false;
  }
  // Decoding: each KV head streams by its own method's rule (docs/FORMATS.md section 12).
  std::vector<const Method*> per_head() const override {
    std::vector<const Method*> out;
    for (const MethodPtr& m : heads_) out.push_back(m.get());
    return out;
  }
  Schedule decode_schedule(int64_t) const override {
    throw std::invalid_argument(spec_ +
                                " decodes each KV head by its own method's rule: ask kvlab::head_method "
                                "for the head");
  }

  // The mean bits of methods that each hold the same number of elements (heads, or layers).
  static Bits mean_bits(const std::vector<MethodPtr>& ms, int64_t T, int64_t D) {
    Bits b;
    for (const MethodPtr& m : ms) {
      const Bits o = m->bits(T, D);
      b.key += o.key / (double)ms.size();
      b.value += o.value / (double)ms.size();
    }
    return b;
  }
  // The range every method of `ms` quantizes.
  template <class F>
  static Schedule intersect(const std::vector<MethodPtr>& ms, F schedule_of) {
    Schedule s = schedule_of(*ms[0]);
    for (const MethodPtr& m : ms) {
      const Schedule o = schedule_of(*m);
      s.key_begin = std::max(s.key_begin, o.key_begin);
      s.key_end = std::max(s.key_begin, std::min(s.key_end, o.key_end));
      s.value_begin = std::max(s.value_begin, o.value_begin);
      s.value_end = std::max(s.value_begin, std::min(s.value_end, o.value_end));
    }
    return s;
  }

 private:
  std::string spec_;
  std::vector<MethodPtr> heads_;
};

class PlanMethod final : public Method {
 public:
  explicit PlanMethod(const std::string& args) {
    if (args.rfind(kKey, 0) != 0 || args.size() <= kKey.size())
      throw std::invalid_argument("plan method: expected plan:file=PLAN.json, got 'plan:" + args + "'");
    path_ = args.substr(kKey.size());
    plan_ = read_plan_file(path_);
    for (const PlanLayer& l : plan_.layers) {
      const std::string at = "plan file '" + path_ + "', layer " + std::to_string(l.layer);
      if (!plan_.per_head) {
        methods_.push_back(parse_one(l.method, at));
        continue;
      }
      std::vector<MethodPtr> heads;
      bool same = true;
      for (const PlanHead& h : l.heads) {
        heads.push_back(parse_one(h.method, at + ", KV head " + std::to_string(h.kv_head)));
        same = same && *heads.back() == *heads[0];
      }
      methods_.push_back(same ? heads[0] : std::make_shared<const HeadsMethod>(at, std::move(heads)));
    }
  }
  const std::string& family() const override { return kName; }
  std::string spec() const override { return kName + ":" + kKey + path_; }
  // The range every layer quantizes (reconstruction errors are taken there; attention metrics
  // see each layer's own cache).
  Schedule schedule(int64_t T) const override {
    return HeadsMethod::intersect(methods_, [T](const Method& m) { return m.schedule(T); });
  }
  // The mean over layers (every layer holds the same number of heads and elements).
  Bits bits(int64_t T, int64_t D) const override { return HeadsMethod::mean_bits(methods_, T, D); }
  void check_model(const ModelShape& s) const override {
    if (plan_.num_layers != s.num_layers || plan_.num_kv_heads != s.num_kv_heads ||
        plan_.head_dim != s.head_dim)
      throw std::invalid_argument("plan file '" + path_ + "' is for " + std::to_string(plan_.num_layers) +
                                  " layers x " + std::to_string(plan_.num_kv_heads) +
                                  " KV heads x head_dim " + std::to_string(plan_.head_dim) + ", not " +
                                  std::to_string(s.num_layers) + " x " + std::to_string(s.num_kv_heads) +
                                  " x " + std::to_string(s.head_dim));
    for (const MethodPtr& m : methods_) m->check_model(s);
  }
  Reconstruction apply(const TensorView& k, const TensorView& v, const HeadContext& at) const override {
    if (at.layer < 0 || at.layer >= (int64_t)methods_.size())
      throw std::invalid_argument("plan file '" + path_ + "' has no layer " + std::to_string(at.layer));
    return methods_[at.layer]->apply(k, v, at);
  }
  std::vector<std::string> files() const override {
    std::vector<std::string> f{path_};
    for (const MethodPtr& m : methods_)
      for (const std::string& x : m->files()) f.push_back(x);
    return f;
  }
  // Decoding: each layer streams by its own method's rule (docs/FORMATS.md section 12).
  std::vector<const Method*> per_layer() const override {
    std::vector<const Method*> out;
    for (const MethodPtr& m : methods_) out.push_back(m.get());
    return out;
  }
  // No one rule serves every layer: callers ask head_method(plan, layer, kv_head) (kvlab/decode_view.h).
  Schedule decode_schedule(int64_t) const override {
    throw std::invalid_argument(
        "method '" + spec() +
        "' decodes each layer (KV head) by its own method's rule: ask kvlab::head_method "
        "for the layer and KV head");
  }
  bool needs_k_pre_rope() const override {
    for (const MethodPtr& m : methods_)
      if (m->needs_k_pre_rope()) return true;
    return false;
  }
  std::string calibration() const override {
    return std::string(plan_.per_head ? "per-head" : "per-layer") + " methods chosen on " +
           plan_.calibration + " (" + plan_.metric + ", budget " + text::format_double(plan_.budget) +
           " bits)";
  }

 private:
  // One method of the plan file: not a plan itself.
  static MethodPtr parse_one(const std::string& spec, const std::string& at) {
    if (spec.rfind(kName + ":", 0) == 0) throw std::invalid_argument(at + " names a plan");
    try {
      return parse_method(spec);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(at + ": " + e.what());
    }
  }

  std::string path_;
  Plan plan_;
  std::vector<MethodPtr> methods_;
};

}  // namespace

void register_plan_method() {
  static std::once_flag once;
  std::call_once(once, [] {
    MethodFamily f;
    f.name = kName;
    f.summary = "one method per layer from a plan file of `kvlab plan` (budgeted mixed precision)";
    f.keys = {{"file", "", "plan file (.json) for this model"}};
    f.parse = [](const std::string& args) -> MethodPtr { return std::make_shared<const PlanMethod>(args); };
    register_method_family(std::move(f));
  });
}

}  // namespace kvlab
