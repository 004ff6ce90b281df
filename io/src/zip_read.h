// Internal: a read-only ZIP archive (the container of .npz and of torch.save files). Methods
// stored (0) and deflate (8); ZIP64 sizes and offsets; no encryption, no multi-disk archives.
// Every error names the file (and the member).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kvlab::detail {

struct ZipEntry {
  std::string name;
  uint16_t method = 0;  // 0 stored, 8 deflate
  uint32_t crc = 0;
  uint64_t compressed = 0;
  uint64_t size = 0;          // uncompressed
  uint64_t local_offset = 0;  // of the local file header
};

class ZipArchive {
 public:
  // Reads the central directory; throws std::runtime_error for a file that is not a ZIP, is
  // truncated (members past its end) or uses what this reader lacks.
  explicit ZipArchive(const std::string& path);
  const std::string& path() const { return path_; }
  const std::vector<ZipEntry>& entries() const { return entries_; }
  const ZipEntry* find(const std::string& name) const;  // nullptr when absent

  // The whole member, its size and CRC-32 checked.
  std::vector<uint8_t> read(const ZipEntry& e) const;
  // Bytes [offset, offset + n) of the uncompressed member: stored members are read in place,
  // deflated ones inflated from the start up to offset + n (earlier output is discarded).
  std::vector<uint8_t> read_range(const ZipEntry& e, uint64_t offset, uint64_t n) const;
  // Reads the whole member in pieces (constant memory) and checks its size and CRC-32.
  void verify(const ZipEntry& e) const;

 private:
  uint64_t data_start(const ZipEntry& e) const;  // after the local header
  void check_not_a_bomb() const;                 // throws for sizes only a ZIP bomb claims
  std::string path_;
  uint64_t file_size_ = 0;
  std::vector<ZipEntry> entries_;
};

// True when the file starts like a ZIP archive ("PK\3\4", or "PK\5\6" when empty).
bool looks_like_zip(const std::string& path);

}  // namespace kvlab::detail
