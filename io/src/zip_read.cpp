#include "zip_read.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <stdexcept>

namespace kvlab::detail {

namespace {

constexpr uint32_t kLocalSig = 0x04034b50, kCentralSig = 0x02014b50, kEndSig = 0x06054b50;
constexpr uint32_t kZip64LocatorSig = 0x07064b50, kZip64EndSig = 0x06064b50;

[[noreturn]] void fail(const std::string& path, const std::string& why) {
  throw std::runtime_error("'" + path + "': " + why);
}
[[noreturn]] void fail(const std::string& path, const std::string& member, const std::string& why) {
  throw std::runtime_error("'" + path + "' member '" + member + "': " + why);
}

uint64_t le(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Reads exactly n bytes at offset, or throws naming what was being read.
std::vector<uint8_t> read_at(std::ifstream& f, const std::string& path, uint64_t offset, uint64_t n,
                             const char* what) {
  std::vector<uint8_t> buf(n);
  if (n == 0) return buf;  // an empty directory; gcount() would still count the last read
  f.clear();
  f.seekg((std::streamoff)offset);
  if (n) f.read(reinterpret_cast<char*>(buf.data()), (std::streamsize)n);
  if (!f || (uint64_t)f.gcount() != n)
    fail(path, std::string("truncated ZIP archive: cannot read the ") + what);
  return buf;
}

std::ifstream open(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(path, "cannot open file");
  return f;
}

// The ZIP64 extra field replaces, in this order, each 32-bit field that holds 0xFFFFFFFF.
void apply_zip64_extra(ZipEntry& e, const uint8_t* x, size_t n, bool size32, bool comp32, bool off32,
                       const std::string& path) {
  for (size_t p = 0; p + 4 <= n;) {
    const uint16_t id = (uint16_t)le(x + p, 2), len = (uint16_t)le(x + p + 2, 2);
    if (p + 4 + len > n) fail(path, e.name, "malformed extra field in the ZIP directory");
    if (id == 0x0001) {
      size_t q = p + 4;
      auto take = [&](uint64_t& field) {
        if (q + 8 > p + 4 + len) fail(path, e.name, "short ZIP64 extra field");
        field = le(x + q, 8);
        q += 8;
      };
      if (size32) take(e.size);
      if (comp32) take(e.compressed);
      if (off32) take(e.local_offset);
    }
    p += 4 + len;
  }
}

}  // namespace

bool looks_like_zip(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  char sig[4] = {};
  // A local header, or the end record of an empty archive.
  return f.read(sig, 4) && (std::memcmp(sig, "PK\x03\x04", 4) == 0 || std::memcmp(sig, "PK\x05\x06", 4) == 0);
}

ZipArchive::ZipArchive(const std::string& path) : path_(path) {
  std::ifstream f = open(path);
  f.seekg(0, std::ios::end);
  file_size_ = (uint64_t)f.tellg();
  // The end record (22 bytes + a comment of at most 65535) closes the file.
  const uint64_t tail = std::min<uint64_t>(file_size_, 22 + 65535);
  const auto buf = read_at(f, path, file_size_ - tail, tail, "end of the file");
  int64_t end = -1;
  for (int64_t i = (int64_t)tail - 22; i >= 0; --i)
    if (le(&buf[i], 4) == kEndSig) {
      end = i;
      break;
    }
  if (end < 0) fail(path, "not a ZIP archive, or truncated: no end-of-central-directory record");
  const uint8_t* e = &buf[end];
  uint64_t count = le(e + 10, 2), cd_size = le(e + 12, 4), cd_offset = le(e + 16, 4);
  if (le(e + 4, 2) != 0 || le(e + 6, 2) != 0) fail(path, "multi-disk ZIP archives are not supported");
  // ZIP64 (numpy's savez uses it for members of 4 GiB and more): a locator right before the end record.
  const uint64_t end_pos = file_size_ - tail + (uint64_t)end;
  if (end_pos >= 20) {
    const auto loc = read_at(f, path, end_pos - 20, 20, "ZIP64 locator");
    if (le(loc.data(), 4) == kZip64LocatorSig) {
      const auto z = read_at(f, path, le(loc.data() + 8, 8), 56, "ZIP64 end record");
      if (le(z.data(), 4) != kZip64EndSig) fail(path, "corrupt ZIP64 end record");
      count = le(z.data() + 32, 8);
      cd_size = le(z.data() + 40, 8);
      cd_offset = le(z.data() + 48, 8);
    }
  }
  if (cd_offset > file_size_ || cd_size > file_size_ - cd_offset)
    fail(path, "truncated ZIP archive: the directory lies past the end of the file (" +
                   std::to_string(file_size_) + " bytes)");
  const auto cd = read_at(f, path, cd_offset, cd_size, "central directory");
  size_t p = 0;
  for (uint64_t i = 0; i < count; ++i) {
    if (p + 46 > cd.size() || le(&cd[p], 4) != kCentralSig) fail(path, "corrupt ZIP central directory");
    const uint8_t* h = &cd[p];
    ZipEntry z;
    const uint16_t flags = (uint16_t)le(h + 8, 2);
    z.method = (uint16_t)le(h + 10, 2);
    z.crc = (uint32_t)le(h + 16, 4);
    z.compressed = le(h + 20, 4);
    z.size = le(h + 24, 4);
    z.local_offset = le(h + 42, 4);
    const size_t nlen = le(h + 28, 2), xlen = le(h + 30, 2), clen = le(h + 32, 2);
    if (p + 46 + nlen + xlen + clen > cd.size()) fail(path, "corrupt ZIP central directory");
    z.name.assign(reinterpret_cast<const char*>(h + 46), nlen);
    apply_zip64_extra(z, h + 46 + nlen, xlen, z.size == 0xffffffffu, z.compressed == 0xffffffffu,
                      z.local_offset == 0xffffffffu, path);
    if (flags & 1) fail(path, z.name, "encrypted ZIP members are not supported");
    if (z.method != 0 && z.method != 8)
      fail(path, z.name,
           "ZIP compression method " + std::to_string(z.method) +
               " is not supported (stored and deflate are: numpy.savez, numpy.savez_compressed)");
    if (z.local_offset > file_size_ || z.compressed > file_size_ - z.local_offset ||
        30 > file_size_ - z.local_offset - z.compressed)
      fail(path, z.name, "truncated ZIP archive: the member lies past the end of the file");
    // Sizes are claims: a stored member holds exactly its bytes, and deflate cannot expand data
    // more than 1032-fold, so no claim exceeds what the file can hold.
    if (z.method == 0 && z.size != z.compressed)
      fail(path, z.name,
           "corrupt ZIP directory: a stored member of " + std::to_string(z.compressed) + " bytes claims " +
               std::to_string(z.size) + " bytes");
    if (z.method == 8 && z.size / 1032 > z.compressed + 1)
      fail(path, z.name,
           "corrupt ZIP directory: " + std::to_string(z.compressed) +
               " bytes of deflate data cannot inflate to " + std::to_string(z.size) + " bytes");
    entries_.push_back(std::move(z));
    p += 46 + nlen + xlen + clen;
  }
  check_not_a_bomb();
}

// A CRC is known only once the whole member is inflated (~1 s of CPU per GiB), so a 10 MB archive
// claiming 10 GiB would take ~10 s to refuse: the archive is judged by its directory first.
// Members whose data add up to more than the file must share bytes (the overlapping-member bomb)
// and are refused; K/V arrays deflate 1.1-2x, so members claiming more than 32x their deflated
// bytes in all, and over 64 MiB, are refused too.
void ZipArchive::check_not_a_bomb() const {
  constexpr uint64_t kMaxRatio = 32, kFreeBytes = 64ull << 20;
  uint64_t held = 0, deflated = 0, claimed = 0;
  for (const auto& z : entries_) {
    held += z.compressed;  // each is at most file_size_, so the sum stops short of overflow
    if (held > file_size_)
      fail(path_, z.name,
           "corrupt ZIP directory: members share bytes (their data add up to more than the " +
               std::to_string(file_size_) + "-byte file)");
    if (z.method != 8) continue;
    deflated += z.compressed;
    if (__builtin_add_overflow(claimed, z.size, &claimed))
      fail(path_, z.name, "member sizes overflow 64 bits");
  }
  if (claimed > kFreeBytes && claimed / kMaxRatio > deflated)
    fail(path_, std::to_string(deflated) + " bytes of deflate data claim " + std::to_string(claimed) +
                    " bytes (over 32-fold): refused as a decompression bomb (K/V data deflate at most a few "
                    "fold; save near-constant arrays with numpy.savez, uncompressed)");
}

const ZipEntry* ZipArchive::find(const std::string& name) const {
  for (const auto& e : entries_)
    if (e.name == name) return &e;
  return nullptr;
}

uint64_t ZipArchive::data_start(const ZipEntry& e) const {
  std::ifstream f = open(path_);
  const auto h = read_at(f, path_, e.local_offset, 30, "local file header");
  if (le(h.data(), 4) != kLocalSig) fail(path_, e.name, "corrupt ZIP archive: bad local header signature");
  // The local header's own name and extra lengths may differ from the directory's.
  const uint64_t start = e.local_offset + 30 + le(h.data() + 26, 2) + le(h.data() + 28, 2);
  if (start > file_size_ || e.compressed > file_size_ - start)
    fail(path_, e.name, "truncated ZIP archive: member data past the end of the file");
  return start;
}

std::vector<uint8_t> ZipArchive::read_range(const ZipEntry& e, uint64_t offset, uint64_t n) const {
  if (offset > e.size || n > e.size - offset)
    fail(path_, e.name,
         "read of bytes [" + std::to_string(offset) + ", " + std::to_string(offset + n) +
             ") past the member's " + std::to_string(e.size) + " bytes");
  const uint64_t start = data_start(e);
  std::ifstream f = open(path_);
  if (e.method == 0) return read_at(f, path_, start + offset, n, "member data");

  // Deflate: inflate in chunks, keeping only the output bytes in [offset, offset + n). `out`
  // grows with what is inflated, so a size the data does not back costs no memory.
  std::vector<uint8_t> out, in(1 << 18), scratch(1 << 18);
  z_stream zs{};
  if (inflateInit2(&zs, -MAX_WBITS) != Z_OK) fail(path_, e.name, "zlib inflateInit2 failed");
  struct Guard {
    z_stream* z;
    ~Guard() { inflateEnd(z); }
  } guard{&zs};
  f.seekg((std::streamoff)start);
  uint64_t left_in = e.compressed, produced = 0;
  int rc = Z_OK;
  while (produced < offset + n) {
    if (zs.avail_in == 0) {
      const uint64_t chunk = std::min<uint64_t>(left_in, in.size());
      if (chunk == 0)
        fail(path_, e.name,
             "truncated deflate data (" + std::to_string(produced) + " of " + std::to_string(e.size) +
                 " bytes)");
      f.read(reinterpret_cast<char*>(in.data()), (std::streamsize)chunk);
      if ((uint64_t)f.gcount() != chunk)
        fail(path_, e.name, "truncated ZIP archive while reading deflate data");
      zs.next_in = in.data();
      zs.avail_in = (uInt)chunk;
      left_in -= chunk;
    }
    // Write straight into `out` once inside the range; before it, into the scratch buffer.
    const bool inside = produced >= offset;
    const uint64_t room = inside ? std::min<uint64_t>(offset + n - produced, 16u << 20)
                                 : std::min<uint64_t>(scratch.size(), offset - produced);
    if (inside) out.resize(produced - offset + room);
    uint8_t* dst = inside ? out.data() + (produced - offset) : scratch.data();
    zs.next_out = dst;
    zs.avail_out = (uInt)std::min<uint64_t>(room, 1u << 30);
    rc = inflate(&zs, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END)
      fail(path_, e.name, std::string("corrupt deflate data (zlib: ") + (zs.msg ? zs.msg : "error") + ")");
    produced += (uint64_t)(zs.next_out - dst);
    if (inside) out.resize(produced - offset);
    if (rc == Z_STREAM_END && produced < offset + n)
      fail(
          path_, e.name,
          "deflate data ends after " + std::to_string(produced) + " of " + std::to_string(e.size) + " bytes");
  }
  return out;
}

std::vector<uint8_t> ZipArchive::read(const ZipEntry& e) const {
  std::vector<uint8_t> data = read_range(e, 0, e.size);
  const uint32_t crc = (uint32_t)crc32_z(0L, data.data(), data.size());
  if (crc != e.crc) fail(path_, e.name, "corrupt ZIP member: CRC-32 mismatch");
  return data;
}

void ZipArchive::verify(const ZipEntry& e) const {
  std::ifstream f = open(path_);
  f.seekg((std::streamoff)data_start(e));
  std::vector<uint8_t> in(1 << 18), out(1 << 18);
  uint64_t left_in = e.compressed, produced = 0;
  uLong crc = 0;
  auto take = [&](uint64_t n) {
    const uint64_t chunk = std::min<uint64_t>(left_in, n);
    f.read(reinterpret_cast<char*>(in.data()), (std::streamsize)chunk);
    if ((uint64_t)f.gcount() != chunk) fail(path_, e.name, "truncated ZIP archive while reading member data");
    left_in -= chunk;
    return chunk;
  };
  if (e.method == 0) {
    while (left_in) {
      const uint64_t n = take(in.size());
      crc = crc32_z(crc, in.data(), n);
      produced += n;
    }
  } else {
    z_stream zs{};
    if (inflateInit2(&zs, -MAX_WBITS) != Z_OK) fail(path_, e.name, "zlib inflateInit2 failed");
    struct Guard {
      z_stream* z;
      ~Guard() { inflateEnd(z); }
    } guard{&zs};
    for (int rc = Z_OK; rc != Z_STREAM_END;) {
      if (zs.avail_in == 0) {
        if (left_in == 0) fail(path_, e.name, "truncated deflate data");
        zs.avail_in = (uInt)take(in.size());
        zs.next_in = in.data();
      }
      zs.next_out = out.data();
      zs.avail_out = (uInt)out.size();
      rc = inflate(&zs, Z_NO_FLUSH);
      if (rc != Z_OK && rc != Z_STREAM_END)
        fail(path_, e.name, std::string("corrupt deflate data (zlib: ") + (zs.msg ? zs.msg : "error") + ")");
      const size_t n = out.size() - zs.avail_out;
      crc = crc32_z(crc, out.data(), n);
      produced += n;
      if (produced > e.size) break;
    }
  }
  if (produced != e.size)
    fail(path_, e.name,
         "corrupt ZIP member: " + std::to_string(produced) + " bytes, the directory says " +
             std::to_string(e.size));
  if ((uint32_t)crc != e.crc) fail(path_, e.name, "corrupt ZIP member: CRC-32 mismatch");
}

}  // namespace kvlab::detail
