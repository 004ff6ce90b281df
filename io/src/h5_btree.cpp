// The chunk table from a version-1 B-tree (h5_btree.h), after the HDF5 File Format
// Specification: object header versions 1 and 2 (with continuation blocks), the data layout
// message version 3 (class 2, chunked), and B-tree nodes of type 1 (raw data chunks). Every
// read is bounded by the file's size; any surprise returns false and libhdf5 takes over.
#include "h5_btree.h"

#include <unistd.h>

#include <cstring>
#include <deque>

#include "h5_util.h"

namespace kvlab::detail {
namespace {

uint64_t le(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = v << 8 | p[i];
  return v;
}

// The file as libhdf5's sec2 driver holds it: addresses are relative to the base (the userblock).
struct File {
  int fd;
  uint64_t base, bytes;
  int sa, ss;  // sizes of addresses and lengths (superblock)

  bool read(uint64_t addr, uint64_t n, std::vector<uint8_t>& out) const {
    uint64_t at = 0, end = 0;
    if (n > (16u << 20) || __builtin_add_overflow(addr, base, &at) || __builtin_add_overflow(at, n, &end) ||
        end > bytes)
      return false;
    out.resize(n);
    for (uint64_t done = 0; done < n;) {
      const ssize_t r = pread(fd, out.data() + done, n - done, (off_t)(at + done));
      if (r <= 0) return false;
      done += (uint64_t)r;
    }
    return true;
  }
  uint64_t absolute(uint64_t addr) const { return addr + base; }
  bool undefined(uint64_t addr) const { return sa == 8 ? addr == ~0ull : addr == (1ull << (8 * sa)) - 1; }
};

// The B-tree address in the dataset's data layout message (version 3, chunked), found by
// walking the object header's messages and continuation blocks; 0 when there is none.
uint64_t btree_address(const File& f, uint64_t header, const ValuePlan& p) {
  std::vector<uint8_t> b;
  if (!f.read(header, 16, b)) return 0;
  const bool v2 = std::memcmp(b.data(), "OHDR", 4) == 0;
  if (!v2 && b[0] != 1) return 0;
  bool order = false;  // v2: messages carry a 2-byte creation order
  struct Block {
    uint64_t addr, bytes;
  };
  std::deque<Block> blocks;
  if (v2) {
    if (b[4] != 2) return 0;
    const uint8_t flags = b[5];
    order = flags & 0x04;
    const uint64_t at = 6 + (flags & 0x20 ? 16 : 0) + (flags & 0x10 ? 4 : 0);
    const int width = 1 << (flags & 3);
    if (!f.read(header + at, width, b)) return 0;
    blocks.push_back({header + at + width, le(b.data(), width)});
  } else {
    blocks.push_back({header + 16, le(b.data() + 8, 4)});
  }
  const int head = v2 ? (order ? 6 : 4) : 8;
  for (int seen = 0; !blocks.empty() && seen < 64; ++seen) {
    const Block blk = blocks.front();
    blocks.pop_front();
    std::vector<uint8_t> m;
    if (!f.read(blk.addr, blk.bytes, m)) return 0;
    for (uint64_t at = 0; at + head <= m.size();) {
      const uint8_t* h = m.data() + at;
      const uint32_t type = v2 ? h[0] : (uint32_t)le(h, 2);
      const uint64_t size = le(h + (v2 ? 1 : 2), 2);
      const uint8_t* d = h + head;
      if (at + head + size > m.size()) return 0;
      if (type == 0x10 && size >= (uint64_t)(f.sa + f.ss)) {  // continuation: address, length
        const uint64_t addr = le(d, f.sa), len = le(d + f.sa, f.ss);
        if (v2) {  // "OCHK", messages, checksum
          if (len < 8) return 0;
          blocks.push_back({addr + 4, len - 8});
        } else {
          blocks.push_back({addr, len});
        }
      } else if (type == 0x08) {
        const uint64_t need = 3 + (uint64_t)f.sa + 4 * 4;
        if (size < need || d[0] != 3 || d[1] != 2 || d[2] != 4) return 0;
        const uint8_t* dims = d + 3 + f.sa;
        for (int i = 0; i < 3; ++i)
          if ((int64_t)le(dims + 4 * i, 4) != p.chunk[i]) return 0;
        if ((int32_t)le(dims + 12, 4) != p.elem) return 0;
        const uint64_t addr = le(d + 3, f.sa);
        return f.undefined(addr) ? 0 : addr;
      }
      at += head + size;
    }
  }
  return 0;
}

// Walks the type-1 B-tree from `root` and fills `out`; false on anything malformed.
bool walk(const File& f, uint64_t root, const ValuePlan& p, unsigned max_entries,
          std::vector<ChunkRef>& out) {
  const uint64_t key = 8 + 8 * 4;  // chunk size, filter mask, 4 offsets (the last is 0)
  std::vector<char> seen(out.size(), 0);
  uint64_t found = 0, nodes = 0;
  struct Node {
    uint64_t addr;
    int level;  // -1: the root, whose level is read
  };
  std::vector<Node> stack{{root, -1}};
  std::vector<uint8_t> b;
  while (!stack.empty()) {
    const Node n = stack.back();
    stack.pop_back();
    if (++nodes > 2 * out.size() + 1) return false;  // every node holds at least one entry
    const uint64_t head = 8 + 2 * (uint64_t)f.sa;
    if (!f.read(n.addr, head, b) || std::memcmp(b.data(), "TREE", 4) != 0 || b[4] != 1) return false;
    const int level = b[5];
    const unsigned entries = (unsigned)le(b.data() + 6, 2);
    if ((n.level >= 0 && level != n.level) || level > 32 || entries == 0 || entries > max_entries)
      return false;
    if (!f.read(n.addr + head, entries * (key + f.sa) + key, b)) return false;
    for (unsigned i = 0; i < entries; ++i) {
      const uint8_t* k = b.data() + i * (key + f.sa);
      const uint64_t child = le(k + key, f.sa);
      if (level > 0) {
        stack.push_back({child, level - 1});
        continue;
      }
      uint64_t at[3];
      for (int d = 0; d < 3; ++d) {
        at[d] = le(k + 8 + 8 * d, 8);
        if (at[d] % p.chunk[d] != 0 || at[d] >= (uint64_t)p.dims[d]) return false;
      }
      // A chunk never written has no storage: the per-chunk path names it as missing.
      if (le(k + 8 + 8 * 3, 8) != 0 || le(k, 4) == 0 || f.undefined(child)) return false;
      const uint64_t idx =
          (at[0] / p.chunk[0] * p.grid(1) + at[1] / p.chunk[1]) * p.grid(2) + at[2] / p.chunk[2];
      if (seen[idx]) return false;
      seen[idx] = 1;
      ++found;
      out[idx] = {f.absolute(child), le(k, 4), (uint32_t)le(k + 4, 4)};
    }
  }
  return found == out.size();
}

}  // namespace

bool chunks_from_btree(hid_t ds, const ValuePlan& p, uint64_t file_bytes, std::vector<ChunkRef>& out) {
  h5::Id file(H5Iget_file_id(ds)), fcpl(file.valid() ? H5Fget_create_plist(file.get()) : H5I_INVALID_HID);
  if (!fcpl.valid()) return false;
  size_t sa = 0, ss = 0;
  hsize_t userblock = 0;
  unsigned ik = 0;
  H5O_info_t info;
  void* handle = nullptr;
  if (H5Pget_sizes(fcpl.get(), &sa, &ss) < 0 || H5Pget_userblock(fcpl.get(), &userblock) < 0 ||
      H5Pget_istore_k(fcpl.get(), &ik) < 0 || H5Oget_info2(ds, &info, H5O_INFO_BASIC) < 0 ||
      H5Fget_vfd_handle(file.get(), H5P_DEFAULT, &handle) < 0 || !handle)
    return false;
  if ((sa != 4 && sa != 8) || (ss != 4 && ss != 8) || ik == 0 || ik > (1u << 15)) return false;
  const File f{*static_cast<int*>(handle), userblock, file_bytes, (int)sa, (int)ss};
  const uint64_t root = btree_address(f, info.addr, p);
  if (root == 0 || !walk(f, root, p, 2 * ik, out)) return false;
  // libhdf5 must agree: every stored size (a logarithmic lookup each), and the first and last
  // chunk whole (H5Dget_chunk_info_by_coord walks up to the chunk it finds).
  for (uint64_t k = 0; k < out.size(); ++k) {
    const hsize_t at[3] = {(hsize_t)(k / (p.grid(1) * p.grid(2)) * p.chunk[0]),
                           (hsize_t)(k / p.grid(2) % p.grid(1) * p.chunk[1]),
                           (hsize_t)(k % p.grid(2) * p.chunk[2])};
    hsize_t size = 0;
    if (H5Dget_chunk_storage_size(ds, at, &size) < 0 || size != out[k].bytes) return false;
    if (k != 0 && k + 1 != out.size()) continue;
    unsigned mask = 0;
    haddr_t addr = HADDR_UNDEF;
    if (H5Dget_chunk_info_by_coord(ds, at, &mask, &addr, &size) < 0 || f.absolute(addr) != out[k].addr ||
        mask != out[k].mask || size != out[k].bytes)
      return false;
  }
  return true;
}

}  // namespace kvlab::detail
