// Named arrays -> DumpReader: find the layout, check every header against the others, then
// read one layer (or head) per call.
#include "named_dump.h"

#include <array>
#include <cctype>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <stdexcept>

namespace kvlab::detail {

namespace {

constexpr Role kRoles[] = {Role::Q, Role::K, Role::V, Role::KPreRope};
constexpr Role kRequired[] = {Role::Q, Role::K, Role::V};
constexpr int64_t kMaxLayers = 1 << 16;  // models have hundreds; a bound on what a file can make us allocate
constexpr const char* kAccepted =
    "accepted: stacked arrays q, k, v [, k_pre_rope] of shape (L, H, T, D), or per-layer arrays "
    "layers/<i>/<role> or layer_<i>_<role> of shape (H, T, D); see docs/DUMP_FORMAT.md";

[[noreturn]] void fail(const std::string& msg) { throw std::runtime_error(msg); }
std::string quote(const std::string& s) { return "'" + s + "'"; }
std::string str(int64_t v) { return std::to_string(v); }

std::optional<Role> role_of(const std::string& s) {
  for (Role r : kRoles)
    if (s == to_string(r)) return r;
  return std::nullopt;
}

// The two per-layer spellings: "layers/<i>/<role>" (as in the HDF5 dump) and "layer_<i>_<role>"
// (np.savez keyword arguments).
struct Spelling {
  const char* prefix;
  char sep;
};
constexpr Spelling kSpellings[] = {{"layers/", '/'}, {"layer_", '_'}};

std::string spell(int spelling, int64_t layer, Role r) {
  return kSpellings[spelling].prefix + str(layer) + kSpellings[spelling].sep + to_string(r);
}

struct PerLayerName {
  int64_t layer;
  Role role;
  int spelling;
};

std::optional<PerLayerName> parse_per_layer(const std::string& name) {
  for (int sp = 0; sp < 2; ++sp) {
    const std::string pre = kSpellings[sp].prefix;
    if (name.compare(0, pre.size(), pre) != 0) continue;
    size_t q = pre.size();
    while (q < name.size() && std::isdigit((unsigned char)name[q])) ++q;
    if (q == pre.size() || q - pre.size() > 9 || q >= name.size() || name[q] != kSpellings[sp].sep)
      return std::nullopt;
    const auto role = role_of(name.substr(q + 1));
    if (!role) return std::nullopt;
    return PerLayerName{std::stoll(name.substr(pre.size(), q - pre.size())), *role, sp};
  }
  return std::nullopt;
}

// One q/k/v array as seen in the file: its member and the (H, T, D) part of its shape.
struct Found {
  std::string name, where;
  std::vector<int64_t> full;  // the array's whole shape, for messages
  std::vector<int64_t> htd;   // (H, T, D)
  std::string dtype;
};

Found inspect(const ArraySource& src, const std::string& name, size_t rank, const char* dims) {
  Found f{name, src.where(name), {}, {}, {}};
  ArrayMeta m = src.meta(name);
  if (m.shape.size() != rank) {
    const bool batch = m.shape.size() == rank + 1 && m.shape[0] == 1;
    fail(f.where + ": expected rank " + str((int64_t)rank) + " " + dims + ", found shape " +
         shape_string(m.shape) + (batch ? "; drop the leading batch dimension (x[0]) before saving" : ""));
  }
  for (int64_t d : m.shape)
    if (d <= 0) fail(f.where + ": shape " + shape_string(m.shape) + " has an empty dimension");
  f.full = m.shape;
  f.htd.assign(m.shape.end() - 3, m.shape.end());
  f.dtype = m.dtype;
  return f;
}

CaptureDtype capture_dtype(const Found& f) {
  if (const auto d = find_enum<CaptureDtype>(f.dtype)) return *d;
  std::string valid = enum_choices<CaptureDtype>();  // "a, b, c" -> "a, b or c"
  valid.replace(valid.rfind(", "), 2, " or ");
  fail(f.where + " has dtype '" + f.dtype + "'; dumps hold " + valid +
       " values: convert it first (numpy: x.astype(np.float32); torch: x.float())");
}

// Every array agrees with the first q (T, D, heads, dtype) and the first k (heads).
void check_consistent(const std::vector<std::pair<Role, Found>>& all, const Found& q0, const Found& k0) {
  static const char* what[] = {"heads", "tokens T", "head_dim D"};
  for (const auto& [role, f] : all) {
    capture_dtype(f);  // a float type, before comparing with the others
    const Found& ref = role == Role::Q ? q0 : k0;
    for (int d = 0; d < 3; ++d) {
      const Found& r = d == 0 ? ref : q0;  // heads against the same kind; T and D against q
      if (f.htd[d] != r.htd[d])
        fail(f.where + " has " + what[d] + " = " + str(f.htd[d]) + " (shape " + shape_string(f.full) +
             ") but " + r.where + " has " + str(r.htd[d]) + " (shape " + shape_string(r.full) + ")" +
             (d == 0 ? "; every " + std::string(role == Role::Q ? "q" : "k, v, k_pre_rope") +
                           " array needs the same number of heads"
                     : "; every array needs the same " + std::string(what[d])));
    }
    if (f.dtype != q0.dtype)
      fail(f.where + " has dtype " + f.dtype + " but " + q0.where + " has " + q0.dtype +
           "; save every array in one dtype");
  }
  if (k0.htd[0] <= 0 || q0.htd[0] % k0.htd[0] != 0)
    fail(q0.where + " has " + str(q0.htd[0]) + " heads, not a multiple of the " + str(k0.htd[0]) +
         " heads of " + k0.where + " (grouped-query attention: query head h reads KV head h / (Hq/Hkv))");
}

std::string model_from_path(const std::string& path) {
  std::filesystem::path p(path);
  if (!p.has_filename()) p = p.parent_path();  // "dir/"
  return p.stem().string();
}

struct Slot {
  std::string name;
  int64_t first = 0;  // flat element index of this layer's block (stacked arrays)
};
using LayerSlots = std::array<Slot, 4>;

class NamedArrayDump final : public DumpReader {
 public:
  NamedArrayDump(std::shared_ptr<const ArraySource> src, DumpInfo info, std::vector<LayerSlots> slots)
      : src_(std::move(src)), info_(std::move(info)), slots_(std::move(slots)) {}
  const DumpInfo& info() const override { return info_; }
  const std::string& path() const override { return src_->path(); }
  Tensor read(int64_t layer, Role role) const override {
    check_request(layer, role, 0);
    return load(layer, role, 0, info_.heads(role));
  }
  Tensor read_head(int64_t layer, Role role, int64_t head) const override {
    check_request(layer, role, head);
    return load(layer, role, head, 1);
  }

 private:
  Tensor load(int64_t layer, Role role, int64_t head, int64_t heads) const {
    const Slot& s = slots_[layer][(int)role];
    const int64_t per_head = info_.tokens * info_.head_dim;
    Tensor t;
    t.shape = {heads, info_.tokens, info_.head_dim};
    t.data = src_->read(s.name, s.first + head * per_head, heads * per_head);
    const std::string what = src_->where(s.name) + " (layer " + str(layer) + ", " + to_string(role) +
                             (heads == 1 ? ", head " + str(head) : "") + ")";
    try {
      check_finite(t.view(), what);
    } catch (const std::invalid_argument& e) {
      fail(e.what());
    }
    return t;
  }

  std::shared_ptr<const ArraySource> src_;
  DumpInfo info_;
  std::vector<LayerSlots> slots_;
};

void read_metadata(const ArraySource& src, DumpInfo& info) {
  if (auto m = src.text("model")) info.model = *m;
  if (auto t = src.text("text")) info.text = *t;
  if (auto s = src.text("rope_style")) {
    try {
      info.rope_style = parse_rope_style(*s);
    } catch (const std::invalid_argument& e) {
      fail(src.where("rope_style") + ": " + e.what());
    }
  }
  if (auto th = src.number("rope_theta")) {
    if (!(*th > 0)) fail(src.where("rope_theta") + ": must be positive, got " + std::to_string(*th));
    info.rope_theta = *th;
  }
  if (auto ids = src.integers("token_ids")) {
    if ((int64_t)ids->size() != info.tokens)
      fail(src.where("token_ids") + " has " + str((int64_t)ids->size()) + " entries for " + str(info.tokens) +
           " tokens");
    for (int64_t id : *ids) {
      if (id < INT32_MIN || id > INT32_MAX)
        fail(src.where("token_ids") + ": id " + str(id) + " does not fit in int32");
      info.token_ids.push_back((int32_t)id);
    }
  }
}

// The source's arrays by role: stacked (L, H, T, D) ones, or one per (layer, role) in one spelling.
struct NameIndex {
  std::map<Role, std::string> stacked;
  std::map<std::pair<int64_t, Role>, std::string> per_layer;
  int spelling = -1;
};

NameIndex index_names(const ArraySource& src, const std::string& path) {
  NameIndex x;
  std::string first_per_layer, seen;
  int n_seen = 0;
  for (const std::string& name : src.names()) {
    if (n_seen++ < 12) seen += (seen.empty() ? "" : ", ") + name;
    if (auto r = role_of(name)) {
      x.stacked[*r] = name;
    } else if (auto pl = parse_per_layer(name)) {
      if (x.spelling >= 0 && pl->spelling != x.spelling)
        fail(quote(path) + ": mixes the per-layer spellings '" + first_per_layer + "' and '" + name +
             "'; use one");
      if (x.spelling < 0) {
        x.spelling = pl->spelling;
        first_per_layer = name;
      }
      auto [it, fresh] = x.per_layer.emplace(std::make_pair(pl->layer, pl->role), name);
      if (!fresh)
        fail(quote(path) + ": '" + it->second + "' and '" + name + "' both hold layer " + str(pl->layer) +
             " " + to_string(pl->role));
    }
  }
  if (n_seen > 12) seen += ", ... (" + str(n_seen) + " in all)";
  if (x.stacked.empty() && x.per_layer.empty())
    fail(quote(path) + ": no q/k/v arrays found (it holds: " + (seen.empty() ? "nothing" : seen) + "); " +
         kAccepted);
  if (!x.stacked.empty() && !x.per_layer.empty())
    fail(quote(path) + ": mixes stacked arrays ('" + x.stacked.begin()->second +
         "') and per-layer arrays ('" + x.per_layer.begin()->second + "'); use one layout");
  return x;
}

// Every array of the dump, inspected, and where each layer's roles are; returns the layer count.
int64_t layout_stacked(const ArraySource& src, const std::string& path, const NameIndex& x,
                       std::vector<std::pair<Role, Found>>& all, std::vector<LayerSlots>& slots) {
  for (Role r : kRequired)
    if (!x.stacked.count(r))
      fail(quote(path) + ": has stacked arrays but no '" + to_string(r) + "' (q, k and v are required); " +
           kAccepted);
  int64_t layers = -1;
  std::string layers_where;
  std::vector<int64_t> layers_shape;
  for (const auto& [role, name] : x.stacked) {
    Found f = inspect(src, name, 4, "(L, H, T, D)");
    if (layers < 0) {
      layers = f.full[0];
      layers_where = f.where;
      layers_shape = f.full;
    }
    if (f.full[0] != layers)
      fail(f.where + " has " + str(f.full[0]) + " layers (shape " + shape_string(f.full) + ") but " +
           layers_where + " has " + str(layers) + " (shape " + shape_string(layers_shape) + ")");
    all.emplace_back(role, std::move(f));
  }
  if (layers > kMaxLayers)  // before the per-layer table is allocated
    fail(layers_where + " has " + str(layers) + " layers (shape " + shape_string(layers_shape) +
         "); kvlab reads at most " + str(kMaxLayers));
  slots.resize(layers);
  for (const auto& [role, f] : all) {
    const int64_t block = f.htd[0] * f.htd[1] * f.htd[2];
    for (int64_t l = 0; l < layers; ++l) slots[l][(int)role] = {f.name, l * block};
  }
  return layers;
}

int64_t layout_per_layer(const ArraySource& src, const std::string& path, const NameIndex& x,
                         std::vector<std::pair<Role, Found>>& all, std::vector<LayerSlots>& slots) {
  const int64_t layers = x.per_layer.rbegin()->first.first + 1;  // map is ordered by layer
  bool pre = false;
  for (const auto& [key, name] : x.per_layer) pre |= key.second == Role::KPreRope;
  // Grown layer by layer: a name claiming layer 999999999 fails at the first missing layer.
  for (int64_t l = 0; l < layers; ++l) {
    slots.emplace_back();
    for (Role r : kRoles) {
      if (r == Role::KPreRope && !pre) continue;
      auto it = x.per_layer.find({l, r});
      if (it == x.per_layer.end())
        fail(quote(path) + ": layer " + str(l) + " has no " + to_string(r) + " (expected an array named '" +
             spell(x.spelling, l, r) + "'" +
             (r == Role::KPreRope ? "; k_pre_rope must be given for every layer or none" : "") + ")");
      all.emplace_back(r, inspect(src, it->second, 3, "(H, T, D)"));
      slots[l][(int)r] = {it->second, 0};
    }
  }
  return layers;
}

}  // namespace

std::unique_ptr<DumpReader> make_named_array_dump(std::shared_ptr<const ArraySource> src,
                                                  const std::string& format) {
  const std::string& path = src->path();
  const NameIndex x = index_names(*src, path);
  std::vector<std::pair<Role, Found>> all;
  std::vector<LayerSlots> slots;
  DumpInfo info;
  info.num_layers = x.stacked.empty() ? layout_per_layer(*src, path, x, all, slots)
                                      : layout_stacked(*src, path, x, all, slots);

  const Found* q0 = nullptr;
  const Found* k0 = nullptr;
  for (const auto& [role, f] : all) {
    if (role == Role::Q && !q0) q0 = &f;
    if (role == Role::K && !k0) k0 = &f;
  }
  check_consistent(all, *q0, *k0);
  info.num_q_heads = q0->htd[0];
  info.num_kv_heads = k0->htd[0];
  info.tokens = q0->htd[1];
  info.head_dim = q0->htd[2];
  info.dtype = capture_dtype(*q0);
  info.has_k_pre_rope = x.stacked.count(Role::KPreRope) || x.per_layer.count({0, Role::KPreRope});
  info.model = model_from_path(path);
  info.source = format + " " + quote(path);
  read_metadata(*src, info);
  try {
    info.validate(quote(path));
  } catch (const std::invalid_argument& e) {
    fail(e.what());
  }
  return std::make_unique<NamedArrayDump>(std::move(src), std::move(info), std::move(slots));
}

}  // namespace kvlab::detail
