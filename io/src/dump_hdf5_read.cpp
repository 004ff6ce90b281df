// The HDF5 dump reader. A child process parses the file with libhdf5 (dump_hdf5_parse.cpp);
// this process gets the metadata and where every dataset's values lie, then reads them lazily,
// one layer and role (or one head) at a time, with pread and its own decoder (h5_plan.h). Only
// layouts that decoder does not take are read by libhdf5, again in a child process.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "convert.h"
#include "dump_hdf5_layout.h"
#include "dump_hdf5_meta.h"
#include "h5_util.h"
#include "isolate.h"
#include "readers.h"

namespace kvlab::detail {

Hdf5DumpMeta read_hdf5_dump_meta(const std::string& message, const std::string& path, uint64_t file_bytes) {
  WireIn r(message, path);
  Hdf5DumpMeta m;
  DumpInfo& i = m.info;
  i.model = r.get_string();
  for (int64_t* v : {&i.num_layers, &i.num_q_heads, &i.num_kv_heads, &i.head_dim, &i.tokens})
    *v = r.get<int64_t>();
  i.rope_theta = r.get<double>();
  i.rope_style = (RopeStyle)r.get<int32_t>();
  i.k_after_rope = r.get<bool>();
  i.has_k_pre_rope = r.get<bool>();
  i.dtype = (CaptureDtype)r.get<int32_t>();
  i.token_ids = r.get_vector<int32_t>();
  i.text = r.get_string();
  i.source = r.get_string();
  try {
    i.validate(path);
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(e.what());
  }
  m.stored = r.get_vector<Stored>();
  if (m.stored.size() != (size_t)i.num_layers * 4)
    throw std::runtime_error(path + ": malformed parse result");
  for (int64_t l = 0; l < i.num_layers; ++l)
    for (Role role : {Role::Q, Role::K, Role::V, Role::KPreRope}) {
      if (role == Role::KPreRope && !i.has_k_pre_rope) {
        m.plans.emplace_back();
        continue;
      }
      const std::string name = dataset_path(l, role);
      m.plans.push_back(get_plan(r, file_bytes, path + ": " + name));
      const ValuePlan& p = m.plans.back();
      if (p.dims[0] != i.heads(role) || p.dims[1] != i.tokens || p.dims[2] != i.head_dim ||
          p.elem != (m.stored[l * 4 + (int)role] == Stored::F32 ? 4 : 2))
        throw std::runtime_error(path + ": malformed parse result for " + name);
    }
  r.finish();
  return m;
}

namespace {

class Hdf5Dump final : public DumpReader {
 public:
  Hdf5Dump(const std::string& path, int fd, Hdf5DumpMeta meta) : path_(path), fd_(fd), m_(std::move(meta)) {}
  ~Hdf5Dump() override { close(fd_); }
  const DumpInfo& info() const override { return m_.info; }
  const std::string& path() const override { return path_; }
  Tensor read(int64_t layer, Role role) const override { return load(layer, role, -1); }
  Tensor read_head(int64_t layer, Role role, int64_t head) const override {
    check_request(layer, role, head);
    return load(layer, role, head);
  }

 private:
  Tensor load(int64_t layer, Role role, int64_t head) const;
  void read_with_libhdf5(const std::string& name, const ValuePlan& p, int64_t h0, int64_t nh,
                         void* raw) const;

  std::string path_;
  int fd_;  // open since the parse: a file renamed over the path later is not read
  Hdf5DumpMeta m_;
};

Tensor Hdf5Dump::load(int64_t layer, Role role, int64_t head) const {
  if (head < 0) check_request(layer, role, 0);
  const std::string name = dataset_path(layer, role);
  const Stored st = m_.stored[layer * 4 + (int)role];
  const ValuePlan& plan = m_.plans[layer * 4 + (int)role];
  const int64_t T = m_.info.tokens, D = m_.info.head_dim;
  const int64_t heads = head < 0 ? m_.info.heads(role) : 1, h0 = std::max<int64_t>(head, 0);
  Tensor out;
  out.shape = {heads, T, D};
  out.data.resize(heads * T * D);

  // Raw bytes as stored (host byte order), then to fp32.
  std::vector<uint16_t> bits(st == Stored::F32 ? 0 : out.data.size());
  void* raw = st == Stored::F32 ? (void*)out.data.data() : (void*)bits.data();
  if (plan.layout == ValuePlan::Layout::Libhdf5)
    read_with_libhdf5(name, plan, h0, heads, raw);
  else
    read_planned(fd_, plan, h0, heads, raw, path_ + ": " + name);
  if (st == Stored::F16)
    half_to_float_n(bits.data(), out.data.data(), (int64_t)bits.size());
  else if (st == Stored::BF16)
    for (size_t i = 0; i < bits.size(); ++i) out.data[i] = bf16_to_float(bits[i]);
  check_finite(out.view(), path_ + ": " + name + (head >= 0 ? " head " + std::to_string(head) : ""));
  return out;
}

// libhdf5 reads into memory shared with a child process, which a corrupt file can only crash.
void Hdf5Dump::read_with_libhdf5(const std::string& name, const ValuePlan& p, int64_t h0, int64_t nh,
                                 void* raw) const {
  const std::string where = path_ + ": " + name;
  const int64_t T = m_.info.tokens, D = m_.info.head_dim;
  const size_t bytes = (size_t)(nh * T * D * p.elem);
  void* shared = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shared == MAP_FAILED)
    throw std::runtime_error(where + ": cannot map " + std::to_string(bytes) +
                             " bytes: " + std::strerror(errno));
  struct Unmap {
    void* p;
    size_t n;
    ~Unmap() { munmap(p, n); }
  } unmap{shared, bytes};
  // Its chunk cache and filter buffers: a few chunks (at most 4 GiB each, checked by get_plan).
  const uint64_t memory = (64ull << 20) + 3 * p.chunk_bytes();
  const double cpu = 1.0 + 10.0 * (double)bytes / (double)(1ull << 30);  // inflating ~0.3 GB/s at least
  std::lock_guard<std::recursive_mutex> g(h5::library_lock());  // no other thread is in libhdf5 at the fork
  run_isolated(
      [&] {
        using h5::Id;
        h5::silence_errors();
        Id file(H5Fopen(path_.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
        Id ds(file.valid() ? H5Dopen2(file.get(), name.c_str(), H5P_DEFAULT) : H5I_INVALID_HID);
        if (!ds.valid()) throw std::runtime_error(where + ": cannot open the dataset again");
        // The stored bits in host order (bfloat16 in an integer type of either sign: no clamping).
        Id stored(H5Dget_type(ds.get())), mem_type(H5Tcopy(stored.get()));
        if (H5Tset_order(mem_type.get(), H5Tget_order(H5T_NATIVE_INT)) < 0)
          throw std::runtime_error(where + ": unreadable element type");
        Id file_space(H5Dget_space(ds.get()));
        const hsize_t start[3] = {(hsize_t)h0, 0, 0}, count[3] = {(hsize_t)nh, (hsize_t)T, (hsize_t)D};
        H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start, nullptr, count, nullptr);
        Id mem_space(H5Screate_simple(3, count, nullptr));
        if (H5Dread(ds.get(), mem_type.get(), mem_space.get(), file_space.get(), H5P_DEFAULT, shared) < 0)
          throw std::runtime_error(where + ": libhdf5 cannot read it (" + p.why +
                                   "): a corrupt file, or a filter this libhdf5 lacks?");
      },
      where, cpu, memory);
  std::memcpy(raw, shared, bytes);
}

}  // namespace

std::unique_ptr<DumpReader> open_hdf5_dump(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error(path + ": cannot open: " + std::strerror(errno));
  try {
    struct stat st;
    if (fstat(fd, &st) != 0) throw std::runtime_error(path + ": cannot stat: " + std::strerror(errno));
    const uint64_t bytes = (uint64_t)st.st_size;
    // Its result holds a chunk table: at most one 24-byte entry per 8 bytes of the file.
    const uint64_t memory = (64ull << 20) + bytes / 8 * 3;
    // Chunk tables of indexes other than the version-1 B-tree cost libhdf5 a quadratic walk
    // (h5_btree.h): 3 s per GiB more than the other parsers get.
    const double cpu = isolated_cpu_budget(bytes) + 3.0 * (double)bytes / (double)(1ull << 30);
    const std::string message =
        run_isolated_result([&] { return parse_hdf5_dump(path, bytes); }, path, cpu, memory);
    return std::make_unique<Hdf5Dump>(path, fd, read_hdf5_dump_meta(message, path, bytes));
  } catch (...) {
    close(fd);
    throw;
  }
}

}  // namespace kvlab::detail
