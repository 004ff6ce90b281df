// What .npz and .npy directories share: dtype names, fp32 conversion, metadata decoding.
#include "numpy_source.h"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <stdexcept>

#include "convert.h"

namespace kvlab::detail {

namespace {

[[noreturn]] void fail(const std::string& msg) { throw std::runtime_error(msg); }

bool is_integer(const std::string& d) {
  static const std::string sizes[] = {"1", "2", "4", "8"};  // what integer_at decodes
  return d.size() == 3 && (d[1] == 'i' || d[1] == 'u') && (d[0] == '<' || d[0] == '|') &&
         std::find(std::begin(sizes), std::end(sizes), d.substr(2)) != std::end(sizes);
}

int64_t integer_at(const NpyArray& a, int64_t i) {
  const size_t n = a.item_size();
  const uint8_t* p = a.bytes.data() + i * n;
  uint64_t u = 0;
  for (size_t b = 0; b < n; ++b) u |= (uint64_t)p[b] << (8 * b);
  if (a.descr[1] == 'i' && n < 8 && (u >> (8 * n - 1)) & 1) u |= ~0ull << (8 * n);  // sign-extend
  return (int64_t)u;  // uint64 above INT64_MAX wraps; token ids never get there
}

}  // namespace

std::string numpy_dtype_name(const std::string& descr) {
  if (descr == "<f2") return "float16";
  if (descr == "<f4") return "float32";
  if (descr == "<f8") return "float64";
  return descr;
}

ArrayMeta NumpySource::meta(const std::string& name) const {
  const NpyHeader h = header(name);
  return {h.shape, numpy_dtype_name(h.descr)};
}

std::vector<float> NumpySource::read(const std::string& name, int64_t first, int64_t count) const {
  const NpyHeader h = header(name);
  const auto bytes = data(name, (uint64_t)first * h.item_size, (uint64_t)count * h.item_size);
  std::vector<float> out(count);
  if (h.descr == "<f4") {
    std::memcpy(out.data(), bytes.data(), bytes.size());
  } else if (h.descr == "<f2") {
    std::vector<uint16_t> half(count);
    std::memcpy(half.data(), bytes.data(), bytes.size());
    half_to_float_n(half.data(), out.data(), count);
  } else {
    fail(where(name) + " has dtype '" + h.descr + "'; expected float16 or float32");
  }
  return out;
}

std::optional<NpyArray> NumpySource::small(const std::string& name) const {
  if (!contains(name)) return std::nullopt;
  return whole(name);
}

std::optional<std::vector<int64_t>> NumpySource::integers(const std::string& name) const {
  auto a = small(name);
  if (!a) return std::nullopt;
  if (!is_integer(a->descr) || a->shape.size() != 1)
    fail(where(name) + " must be a 1-d integer array, found dtype '" + a->descr + "' shape " +
         shape_string(a->shape));
  std::vector<int64_t> out(a->numel());
  for (int64_t i = 0; i < a->numel(); ++i) out[i] = integer_at(*a, i);
  return out;
}

std::optional<double> NumpySource::number(const std::string& name) const {
  auto a = small(name);
  if (!a) return std::nullopt;
  if (a->numel() != 1) fail(where(name) + " must hold one number, found shape " + shape_string(a->shape));
  if (a->descr == "<f8") {
    double d;
    std::memcpy(&d, a->bytes.data(), 8);
    return d;
  }
  if (a->descr == "<f4") {
    float f;
    std::memcpy(&f, a->bytes.data(), 4);
    return f;
  }
  if (is_integer(a->descr)) return (double)integer_at(*a, 0);
  fail(where(name) + " must be a number (float or integer), found dtype '" + a->descr + "'");
}

std::optional<std::string> NumpySource::text(const std::string& name) const {
  auto a = small(name);
  if (!a) return std::nullopt;
  if (a->numel() != 1 || a->descr.size() < 3 || (a->descr[1] != 'U' && a->descr[1] != 'S'))
    fail(where(name) + " must be one string (np.array('...')), found dtype '" + a->descr + "' shape " +
         shape_string(a->shape));
  std::string s;
  if (a->descr[1] == 'S') {
    s.assign(a->bytes.begin(), a->bytes.end());
  } else {  // UTF-32LE code points -> UTF-8
    for (size_t i = 0; i + 4 <= a->bytes.size(); i += 4) {
      uint32_t c;
      std::memcpy(&c, a->bytes.data() + i, 4);
      if (c < 0x80)
        s += (char)c;
      else if (c < 0x800) {
        s += (char)(0xc0 | (c >> 6));
        s += (char)(0x80 | (c & 0x3f));
      } else if (c < 0x10000) {
        s += (char)(0xe0 | (c >> 12));
        s += (char)(0x80 | ((c >> 6) & 0x3f));
        s += (char)(0x80 | (c & 0x3f));
      } else {
        s += (char)(0xf0 | (c >> 18));
        s += (char)(0x80 | ((c >> 12) & 0x3f));
        s += (char)(0x80 | ((c >> 6) & 0x3f));
        s += (char)(0x80 | (c & 0x3f));
      }
    }
  }
  while (!s.empty() && s.back() == '\0') s.pop_back();  // numpy pads fixed-width strings with NULs
  return s;
}

}  // namespace kvlab::detail
