// .npz reading on top of the ZIP reader: members are "<name>.npy", one array each.
#include <algorithm>
#include <stdexcept>

#include "kvlab/npy.h"
#include "zip_read.h"

namespace kvlab {

namespace {
// Bytes up to the end of the .npy header, from its first 12 bytes; when those are not a valid
// start, or claim more than the member holds, all of `n`, so that parse_npy_header reports it.
uint64_t header_end(const std::vector<uint8_t>& p, uint64_t n) {
  const uint64_t end = npy_header_size(p.data(), p.size());
  return end == 0 ? n : std::min(end, n);
}

std::string strip_npy(const std::string& name) {
  return name.size() > 4 && name.compare(name.size() - 4, 4, ".npy") == 0 ? name.substr(0, name.size() - 4)
                                                                          : name;
}
}  // namespace

struct NpzReader::Impl {
  detail::ZipArchive zip;
  explicit Impl(const std::string& path) : zip(path) {}

  const detail::ZipEntry& entry(const std::string& name) const {
    if (const auto* e = zip.find(name + ".npy")) return *e;
    if (const auto* e = zip.find(name)) return *e;
    throw std::runtime_error("'" + zip.path() + "': no array '" + name + "' in the .npz");
  }
};

NpzReader::NpzReader(const std::string& path) : impl_(std::make_unique<Impl>(path)) {}
NpzReader::~NpzReader() = default;
NpzReader::NpzReader(NpzReader&&) noexcept = default;

const std::string& NpzReader::path() const { return impl_->zip.path(); }

std::vector<std::string> NpzReader::names() const {
  std::vector<std::string> out;
  for (const auto& e : impl_->zip.entries())
    if (!e.name.empty() && e.name.back() != '/') out.push_back(strip_npy(e.name));  // skip directory entries
  return out;
}

bool NpzReader::contains(const std::string& name) const {
  return impl_->zip.find(name + ".npy") || impl_->zip.find(name);
}

std::string NpzReader::where(const std::string& name) const {
  return "'" + path() + "' member '" + name + "'";
}

NpyHeader NpzReader::header(const std::string& name) const {
  const auto& e = impl_->entry(name);
  // Two small reads, so a deflated member is inflated only as far as its header.
  const auto start = impl_->zip.read_range(e, 0, std::min<uint64_t>(e.size, 12));
  const auto head = impl_->zip.read_range(e, 0, header_end(start, e.size));
  NpyHeader h = parse_npy_header(head.data(), head.size(), where(name));
  const uint64_t have = e.size - std::min<uint64_t>(e.size, h.data_offset);
  if (have < h.data_bytes)
    throw std::runtime_error(where(name) + ": truncated .npy data: shape " + shape_string(h.shape) +
                             " needs " + std::to_string(h.data_bytes) + " bytes, the member holds " +
                             std::to_string(have));
  return h;
}

NpyArray NpzReader::read(const std::string& name) const {
  const auto bytes = impl_->zip.read(impl_->entry(name));
  return parse_npy(bytes.data(), bytes.size(), where(name));
}

void NpzReader::verify(const std::string& name) const { impl_->zip.verify(impl_->entry(name)); }

std::vector<uint8_t> NpzReader::read_data(const std::string& name, uint64_t offset, uint64_t n) const {
  const NpyHeader h = header(name);
  const auto& e = impl_->entry(name);
  if (offset == 0 && h.data_offset + n == e.size) {  // the whole array: read it CRC-checked
    auto all = impl_->zip.read(e);
    all.erase(all.begin(), all.begin() + (std::ptrdiff_t)h.data_offset);
    return all;
  }
  return impl_->zip.read_range(e, h.data_offset + offset, n);
}

std::vector<std::pair<std::string, NpyArray>> read_npz(const std::string& path) {
  const NpzReader npz(path);
  std::vector<std::pair<std::string, NpyArray>> out;
  for (const auto& name : npz.names()) out.emplace_back(name, npz.read(name));
  return out;
}

}  // namespace kvlab
