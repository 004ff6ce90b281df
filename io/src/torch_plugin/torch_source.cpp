// The libtorch side of the torch.save reader, built alone as a plugin (libkvlab_torch.so) that
// dump_torch.cpp loads with dlopen when a torch file is opened. Linking libtorch into every
// kvlab program instead would cost each of them ~0.8 s and ~150 MB at start. This is the only
// file that sees libtorch's headers; it uses nothing of kvlab but the ArraySource interface
// (header-only), so the plugin needs no kvlab symbols.
//
// Accepted (docs/DUMP_FORMAT.md): a dict with string keys (the names of named_dump.h), or a
// list or tuple of per-layer tuples (q, k, v) or (q, k, v, k_pre_rope), named layers/<i>/<role>.
// Not lazy: libtorch reads the whole file; the tensors stay in memory in their saved dtype
// (about the file's size; twice that while loading) and read() converts one slice to fp32.
#include <ATen/ATen.h>
#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/import_read.h>
#include <torch/csrc/jit/serialization/storage_context.h>
#include <torch/csrc/jit/serialization/unpickler.h>

#include <cstring>
#include <map>
#include <memory>
#include <stdexcept>

#include "../array_source.h"

namespace {

using kvlab::detail::ArrayMeta;
using kvlab::detail::ArraySource;

[[noreturn]] void fail(const std::string& msg) { throw std::runtime_error(msg); }

std::string dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kHalf: return "float16";
    case at::kBFloat16: return "bfloat16";
    case at::kFloat: return "float32";
    case at::kDouble: return "float64";
    default: return std::string("torch.") + c10::toString(t);
  }
}

std::string shape_text(const std::vector<int64_t>& v) {
  std::string s = "(";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + ")";
}

class TorchSource final : public ArraySource {
 public:
  // `labels`: how errors name an entry that had no name in the file ("item 3 (v)").
  TorchSource(std::string path, std::map<std::string, c10::IValue> entries,
              std::map<std::string, std::string> labels)
      : path_(std::move(path)), entries_(std::move(entries)), labels_(std::move(labels)) {}
  const std::string& path() const override { return path_; }
  std::vector<std::string> names() const override {
    std::vector<std::string> out;
    for (const auto& [name, v] : entries_)
      if (v.isTensor()) out.push_back(name);
    return out;
  }
  std::string where(const std::string& name) const override {
    auto it = labels_.find(name);
    return "'" + path_ + "' " + (it != labels_.end() ? it->second : "entry '" + name + "'");
  }

  ArrayMeta meta(const std::string& name) const override {
    const at::Tensor& t = tensor(name);
    return {t.sizes().vec(), dtype_name(t.scalar_type())};
  }

  std::vector<float> read(const std::string& name, int64_t first, int64_t count) const override {
    const at::Tensor part = tensor(name).reshape({-1}).narrow(0, first, count).to(at::kFloat).contiguous();
    std::vector<float> out(count);
    std::memcpy(out.data(), part.data_ptr<float>(), count * sizeof(float));
    return out;
  }

  // torch.load refuses a tensor whose sizes and strides reach past its storage; pickle_load
  // does not, and reading it would read other memory.
  void check_storages() const {
    for (const auto& [name, v] : entries_) {
      if (!v.isTensor() || v.toTensor().numel() == 0) continue;
      const at::Tensor& t = v.toTensor();
      int64_t last = t.storage_offset();
      bool bad = last < 0;
      for (int64_t d = 0; d < t.dim() && !bad; ++d) {
        int64_t step;
        bad = t.stride(d) < 0 || __builtin_mul_overflow(t.size(d) - 1, t.stride(d), &step) ||
              __builtin_add_overflow(last, step, &last);
      }
      const int64_t have = (int64_t)(t.storage().nbytes() / t.element_size());
      if (bad || last >= have)
        fail(where(name) + ": its sizes " + shape_text(t.sizes().vec()) + ", strides " +
             shape_text(t.strides().vec()) + " and offset " + std::to_string(t.storage_offset()) +
             " reach past its storage of " + std::to_string(have) + " elements (torch.load refuses it)");
    }
  }

  std::optional<std::vector<int64_t>> integers(const std::string& name) const override {
    const c10::IValue* v = find(name);
    if (!v) return std::nullopt;
    if (v->isList()) {  // a Python list unpickles as a generic list
      std::vector<int64_t> out;
      for (const c10::IValue& x : v->toListRef()) {
        if (!x.isInt()) fail(where(name) + " must hold only ints, found a " + x.tagKind());
        out.push_back(x.toInt());
      }
      return out;
    }
    if (v->isTensor() && v->toTensor().dim() == 1 && !v->toTensor().is_floating_point()) {
      const at::Tensor t = v->toTensor().to(at::kLong).contiguous();
      return std::vector<int64_t>(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
    }
    fail(where(name) + " must be a list of ints or a 1-d integer tensor, found " + v->tagKind());
  }

  std::optional<double> number(const std::string& name) const override {
    const c10::IValue* v = find(name);
    if (!v) return std::nullopt;
    if (v->isDouble()) return v->toDouble();
    if (v->isInt()) return (double)v->toInt();
    if (v->isTensor() && v->toTensor().numel() == 1) return v->toTensor().to(at::kDouble).item<double>();
    fail(where(name) + " must be a number, found " + v->tagKind());
  }

  std::optional<std::string> text(const std::string& name) const override {
    const c10::IValue* v = find(name);
    if (!v) return std::nullopt;
    if (!v->isString()) fail(where(name) + " must be a string, found " + v->tagKind());
    return v->toStringRef();
  }

 private:
  const c10::IValue* find(const std::string& name) const {
    auto it = entries_.find(name);
    return it == entries_.end() ? nullptr : &it->second;
  }
  const at::Tensor& tensor(const std::string& name) const {
    const c10::IValue* v = find(name);
    if (!v || !v->isTensor()) fail(where(name) + ": no such tensor");
    return v->toTensor();
  }

  std::string path_;
  std::map<std::string, c10::IValue> entries_;
  std::map<std::string, std::string> labels_;
};

// A list of per-layer tuples becomes the names layers/<i>/<role>.
std::map<std::string, c10::IValue> from_layer_list(const std::string& path,
                                                   const std::vector<c10::IValue>& layers,
                                                   std::map<std::string, std::string>& labels) {
  static const char* roles[] = {"q", "k", "v", "k_pre_rope"};
  std::map<std::string, c10::IValue> out;
  for (size_t l = 0; l < layers.size(); ++l) {
    const c10::IValue& e = layers[l];
    const std::string item = "'" + path + "' item " + std::to_string(l);
    std::vector<c10::IValue> parts;
    if (e.isTuple())
      parts = e.toTupleRef().elements().vec();
    else if (e.isList())
      parts = e.toListRef().vec();
    else
      fail(item + " is a " + e.tagKind() + "; expected a tuple (q, k, v)");
    if (parts.size() == 2)
      fail(
          item +
          " is a pair, like (k, v) from a KV cache: a dump also needs the queries; save (q, k, v) per layer");
    if (parts.size() != 3 && parts.size() != 4)
      fail(item + " has " + std::to_string(parts.size()) +
           " elements; expected (q, k, v) or (q, k, v, k_pre_rope)");
    for (size_t r = 0; r < parts.size(); ++r) {
      if (!parts[r].isTensor())
        fail(item + " element " + std::to_string(r) + " (" + roles[r] + ") is a " + parts[r].tagKind() +
             ", not a tensor");
      const std::string name = "layers/" + std::to_string(l) + "/" + roles[r];
      out[name] = parts[r];
      labels[name] = "item " + std::to_string(l) + " (" + roles[r] + ")";
    }
  }
  return out;
}

// pickle_load's steps, with a storage context that keeps each storage by its key: the pickle
// states a storage's size, the record holds its bytes, and libtorch does not compare them.
c10::IValue load(const std::string& path) {
  try {
    caffe2::serialize::PyTorchStreamReader reader(path);
    auto storages = std::make_shared<torch::jit::DeserializationStorageContext>();
    c10::IValue root =
        torch::jit::readArchiveAndTensors("data", "", "", c10::nullopt, c10::nullopt, c10::nullopt, reader,
                                          torch::jit::Unpickler::defaultTypeParser, storages);
    for (const std::string& record : reader.getAllRecords()) {
      if (record.rfind("data/", 0) != 0 || !storages->hasStorage(record.substr(5))) continue;
      const size_t claimed = storages->getStorage(record.substr(5)).nbytes();
      const size_t held = std::get<1>(reader.getRecord(record));
      if (claimed > held)
        fail("'" + path + "' storage '" + record + "' holds " + std::to_string(held) +
             " bytes but its pickle says " + std::to_string(claimed) +
             " (corrupt file; torch.load refuses it)");
    }
    return root;
  } catch (const c10::Error& e) {
    std::string why = e.what_without_backtrace();
    if (why.find("'CUDA' backend") != std::string::npos)  // libtorch lists every backend after it
      fail("'" + path + "' holds tensors saved on a GPU; move them to the CPU before saving (x.cpu())");
    why = why.substr(0, why.find('\n'));
    fail("'" + path + "': libtorch cannot read it as a torch.save file: " + why.substr(0, 400));
  }
}

}  // namespace

// The plugin's one entry point (dump_torch.cpp looks it up by name). Throws std::runtime_error
// naming the file; the caller owns the result.
extern "C" __attribute__((visibility("default"))) ArraySource* kvlab_open_torch_source(
    const std::string& path) {
  const c10::IValue root = load(path);
  std::map<std::string, c10::IValue> entries;
  std::map<std::string, std::string> labels;
  if (root.isGenericDict()) {
    for (const auto& kv : root.toGenericDict()) {
      if (!kv.key().isString())
        fail("'" + path + "': dict keys must be strings (q, k, v, layers/0/q, ...), found a " +
             kv.key().tagKind());
      entries[kv.key().toStringRef()] = kv.value();
    }
  } else if (root.isList() || root.isTuple()) {
    entries = from_layer_list(
        path, root.isList() ? root.toListRef().vec() : root.toTupleRef().elements().vec(), labels);
  } else if (root.isTensor()) {
    fail("'" + path +
         "' holds a single tensor, which cannot say which part is q, k or v; save a dict: "
         "torch.save({'q': q, 'k': k, 'v': v}, path) with each (L, H, T, D)");
  } else {
    fail("'" + path + "' holds a " + root.tagKind() +
         "; expected a dict of tensors or a list of (q, k, v) tuples");
  }
  auto* src = new TorchSource(path, std::move(entries), std::move(labels));
  std::unique_ptr<TorchSource> owner(src);
  src->check_storages();
  return owner.release();
}
