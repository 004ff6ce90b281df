#include "kvlab/npy.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>

#include "checked.h"
#include "kvlab/atomic_file.h"

namespace kvlab {

size_t NpyArray::item_size() const {
  // At most 6 digits: numpy's own dtypes are far smaller, and the product below cannot overflow.
  const size_t digits = descr.size() - std::min<size_t>(descr.size(), 2);
  if (descr.size() < 3 || digits > 6 || descr.find_first_not_of("0123456789", 2) != std::string::npos)
    throw std::runtime_error("npy: bad dtype '" + descr + "'");
  const size_t n = (size_t)std::stoul(descr.substr(2));
  return descr[1] == 'U' ? 4 * n : n;  // '<U5': five UTF-32 code units
}

int64_t NpyArray::numel() const {
  int64_t n = 1;
  for (auto d : shape)
    if (d == 0) return 0;
  for (auto d : shape)
    if (d < 0 || __builtin_mul_overflow(n, d, &n))
      throw std::runtime_error("npy: shape " + shape_string(shape) + " has no valid element count");
  return n;
}

namespace {

constexpr size_t kMaxNpyHeader = 1 << 20;  // numpy's own limit is 10000 bytes

// `where` is already quoted: "'a.npy'" or "'a.npz' member 'q'".
[[noreturn]] void fail_at(const std::string& where, const std::string& why) {
  throw std::runtime_error(where + ": " + why);
}
[[noreturn]] void fail(const std::string& path, const std::string& why) { fail_at("'" + path + "'", why); }

// Value of `'key': value` in the header dict (up to the next ',' at depth 0 or '}').
std::string header_field(const std::string& h, const std::string& key, const std::string& where) {
  const size_t k = h.find("'" + key + "'");
  if (k == std::string::npos) fail_at(where, "npy header lacks '" + key + "': " + h);
  size_t p = h.find(':', k);
  if (p == std::string::npos) fail_at(where, "npy header malformed: " + h);
  ++p;
  while (p < h.size() && h[p] == ' ') ++p;
  size_t e = p;
  int depth = 0;
  for (; e < h.size(); ++e) {
    if (h[e] == '(') ++depth;
    if (h[e] == ')') --depth;
    if (depth == 0 && (h[e] == ',' || h[e] == '}')) break;
  }
  return h.substr(p, e - p);
}

std::vector<int64_t> parse_shape(const std::string& s, const std::string& where) {
  if (s.size() < 2 || s.front() != '(' || s.back() != ')')
    fail_at(where, "npy shape '" + s + "' is not a tuple");
  std::vector<int64_t> shape;
  std::string num;
  for (size_t i = 1; i + 1 <= s.size(); ++i) {
    const char c = s[i];
    if (c >= '0' && c <= '9') {
      num += c;
      if (num.size() > 18) fail_at(where, "npy shape '" + s + "' has a dimension of more than 18 digits");
    } else if (c == ',' || c == ')') {
      if (!num.empty()) {
        shape.push_back(std::stoll(num));
        num.clear();
      }
    } else if (c != ' ' && c != 'L')
      fail_at(where, "npy shape '" + s + "' is malformed");
  }
  return shape;
}

std::string header_text(const NpyArray& a) {
  std::string shape = "(";
  for (size_t i = 0; i < a.shape.size(); ++i)
    shape += std::to_string(a.shape[i]) + (i + 1 < a.shape.size() ? ", " : "");
  if (a.shape.size() == 1) shape += ",";
  shape += ")";
  std::string h = "{'descr': '" + a.descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  const size_t total = 10 + h.size() + 1;
  h.append((64 - total % 64) % 64, ' ');
  return h + "\n";
}

}  // namespace

NpyHeader parse_npy_header(const uint8_t* p, size_t n, const std::string& where) {
  if (n < 10 || std::memcmp(p, "\x93NUMPY", 6) != 0)
    fail_at(where, "not a .npy file (bad magic or shorter than 10 bytes)");
  const int major = p[6];
  size_t hlen, hstart;
  if (major == 1) {
    hlen = p[8] | (p[9] << 8);
    hstart = 10;
  } else if (major == 2 || major == 3) {
    if (n < 12) fail_at(where, "truncated .npy header");
    hlen = p[8] | (p[9] << 8) | (p[10] << 16) | ((size_t)p[11] << 24);
    hstart = 12;
  } else
    fail_at(where, "unsupported .npy format version " + std::to_string(major));
  if (hlen > kMaxNpyHeader)
    fail_at(where,
            "npy header of " + std::to_string(hlen) + " bytes (more than 1 MiB): not a numpy array file");
  if (n < hstart + hlen) fail_at(where, "truncated .npy header");
  const std::string h(p + hstart, p + hstart + hlen);
  NpyHeader out;
  std::string descr = header_field(h, "descr", where);
  if (descr.size() < 2 || descr.front() != '\'')
    fail_at(where, "npy dtype " + descr + " is not a simple dtype");
  out.descr = descr.substr(1, descr.size() - 2);
  if (out.descr.empty() || out.descr[0] == '>')
    fail_at(where, "npy dtype '" + out.descr + "' is big-endian or empty; save little-endian data");
  if (header_field(h, "fortran_order", where) != "False")
    fail_at(where, "npy array is in Fortran order; save it with np.ascontiguousarray");
  out.shape = parse_shape(header_field(h, "shape", where), where);
  NpyArray probe;
  probe.descr = out.descr;
  try {
    out.item_size = probe.item_size();
  } catch (const std::exception&) {
    fail_at(where, "npy dtype '" + out.descr + "' is not a fixed-size numeric type");
  }
  out.data_offset = hstart + hlen;
  out.data_bytes = detail::checked_bytes(out.shape, out.item_size, where);
  return out;
}

NpyArray parse_npy(const uint8_t* p, size_t n, const std::string& where) {
  const NpyHeader h = parse_npy_header(p, n, where);
  NpyArray a;
  a.descr = h.descr;
  a.shape = h.shape;
  const uint64_t need = h.data_bytes, have = n - h.data_offset;
  if (have < need)
    fail_at(where, "truncated .npy data: shape needs " + std::to_string(need) + " bytes, file holds " +
                       std::to_string(have));
  a.bytes.assign(p + h.data_offset, p + h.data_offset + need);
  return a;
}

size_t npy_header_size(const uint8_t* p, size_t n) {
  if (n < 10 || std::memcmp(p, "\x93NUMPY", 6) != 0 || p[6] < 1 || p[6] > 3) return 0;
  if (p[6] == 1) return 10 + (p[8] | (p[9] << 8));
  return n < 12 ? 0 : 12 + (p[8] | (p[9] << 8) | (p[10] << 16) | ((size_t)p[11] << 24));
}

NpyArray read_npy(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(path, "cannot open file");
  // The header, then exactly the bytes it claims, read in pieces: memory follows what the file
  // holds, so a file that never ends (/dev/zero) or claims too much fails without a big allocation.
  std::vector<uint8_t> buf(12);
  f.read(reinterpret_cast<char*>(buf.data()), 12);
  buf.resize((size_t)f.gcount());
  const size_t head = npy_header_size(buf.data(), buf.size());
  if (head > kMaxNpyHeader)
    fail(path, "npy header of " + std::to_string(head) + " bytes (more than 1 MiB): not a numpy array file");
  if (head > buf.size()) {
    const size_t have = buf.size();
    buf.resize(head);
    f.read(reinterpret_cast<char*>(buf.data() + have), (std::streamsize)(head - have));
    buf.resize(have + (size_t)f.gcount());
  }
  const NpyHeader h = parse_npy_header(buf.data(), buf.size(), "'" + path + "'");
  const uint64_t end = h.data_offset + h.data_bytes;
  for (uint64_t at = buf.size(); at < end && f;) {
    const uint64_t step = std::min<uint64_t>(end - at, 16u << 20);
    buf.resize(at + step);
    f.read(reinterpret_cast<char*>(buf.data() + at), (std::streamsize)step);
    at += (uint64_t)f.gcount();
    buf.resize(at);
  }
  return parse_npy(buf.data(), buf.size(), "'" + path + "'");
}

std::vector<uint8_t> npy_bytes(const NpyArray& a) {
  const std::string h = header_text(a);
  const uint8_t magic[10] = {
      0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (uint8_t)(h.size() & 0xff), (uint8_t)(h.size() >> 8)};
  std::vector<uint8_t> out(10 + h.size() + a.bytes.size());
  std::memcpy(out.data(), magic, 10);
  std::memcpy(out.data() + 10, h.data(), h.size());
  if (!a.bytes.empty()) std::memcpy(out.data() + 10 + h.size(), a.bytes.data(), a.bytes.size());
  return out;
}

void write_npy(const std::string& path, const NpyArray& a) {
  const auto bytes = npy_bytes(a);
  AtomicFile f(path);
  f.write(bytes.data(), bytes.size());
  f.commit();
}

template <class T>
static NpyArray make(const std::vector<T>& v, std::vector<int64_t> shape, const char* descr) {
  NpyArray a;
  a.descr = descr;
  a.shape = std::move(shape);
  if (a.numel() != (int64_t)v.size()) throw std::logic_error("make_npy: data size does not match shape");
  a.bytes.resize(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(a.bytes.data(), v.data(), a.bytes.size());
  return a;
}
NpyArray make_npy(const std::vector<float>& v, std::vector<int64_t> s) {
  return make(v, std::move(s), "<f4");
}
NpyArray make_npy(const std::vector<uint16_t>& v, std::vector<int64_t> s) {
  return make(v, std::move(s), "<f2");
}
NpyArray make_npy(const std::vector<uint8_t>& v, std::vector<int64_t> s) {
  return make(v, std::move(s), "|u1");
}

TensorView as_tensor(const NpyArray& a, const std::string& path) {
  DType t;
  if (a.descr == "<f2")
    t = DType::F16;
  else if (a.descr == "<f4")
    t = DType::F32;
  else
    fail(path, "dtype '" + a.descr + "' is not supported here; use float16 ('<f2') or float32 ('<f4')");
  return {a.bytes.data(), t, a.shape};
}

// ZIP container, method 0 (stored), no ZIP64: each member and the archive stay below 4 GiB.
void write_npz(const std::string& path, const std::vector<std::pair<std::string, NpyArray>>& arrays) {
  std::vector<uint8_t> central;
  uint64_t offset = 0;
  AtomicFile f(path);
  auto put16 = [](std::vector<uint8_t>& b, uint32_t v) {
    b.push_back(v & 0xff);
    b.push_back((v >> 8) & 0xff);
  };
  auto put32 = [&](std::vector<uint8_t>& b, uint32_t v) {
    put16(b, v & 0xffff);
    put16(b, v >> 16);
  };
  for (const auto& [name, arr] : arrays) {
    const auto data = npy_bytes(arr);
    const std::string fname = name + ".npy";
    if (data.size() >= 0xffffffffull || offset >= 0xffffffffull)
      throw std::runtime_error("'" + path + "': array '" + name +
                               "' makes the .npz exceed 4 GiB (no ZIP64 support)");
    const uint32_t crc = (uint32_t)crc32_z(0L, data.data(), data.size());
    std::vector<uint8_t> local;
    put32(local, 0x04034b50);
    put16(local, 20);
    put16(local, 0);
    put16(local, 0);
    put16(local, 0);
    put16(local, 0x21);
    put32(local, crc);
    put32(local, (uint32_t)data.size());
    put32(local, (uint32_t)data.size());
    put16(local, (uint32_t)fname.size());
    put16(local, 0);
    local.insert(local.end(), fname.begin(), fname.end());
    put32(central, 0x02014b50);
    put16(central, 20);
    put16(central, 20);
    put16(central, 0);
    put16(central, 0);
    put16(central, 0);
    put16(central, 0x21);
    put32(central, crc);
    put32(central, (uint32_t)data.size());
    put32(central, (uint32_t)data.size());
    put16(central, (uint32_t)fname.size());
    put16(central, 0);
    put16(central, 0);
    put16(central, 0);
    put16(central, 0);
    put32(central, 0);
    put32(central, (uint32_t)offset);
    central.insert(central.end(), fname.begin(), fname.end());
    f.write(local.data(), local.size());
    f.write(data.data(), data.size());
    offset += local.size() + data.size();
  }
  std::vector<uint8_t> end;
  put32(end, 0x06054b50);
  put16(end, 0);
  put16(end, 0);
  put16(end, (uint32_t)arrays.size());
  put16(end, (uint32_t)arrays.size());
  put32(end, (uint32_t)central.size());
  put32(end, (uint32_t)offset);
  put16(end, 0);
  f.write(central.data(), central.size());
  f.write(end.data(), end.size());
  f.commit();
}

}  // namespace kvlab
