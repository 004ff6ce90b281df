// DumpWriter: the HDF5 dump format, written to a temporary file and renamed when complete.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>
#include <stdexcept>
#include <utility>
#include <vector>

#include "convert.h"
#include "dump_hdf5_layout.h"
#include "h5_chunks.h"
#include "h5_util.h"
#include "kvlab/dump.h"
#include "kvlab/temp_file.h"

namespace kvlab {

using h5::Id;

struct DumpWriter::Impl {
  std::string path;
  std::unique_ptr<TempFile> tmp;
  DumpInfo info;
  DumpWriteOptions options;
  Id file;
  std::set<std::pair<int64_t, Role>> written;
  bool committed = false;

  [[noreturn]] void fail(const std::string& what) const { throw std::runtime_error(path + ": " + what); }
  // The caller's arguments or values are wrong (not the file): invalid_argument, as everywhere.
  [[noreturn]] void refuse(const std::string& what) const { throw std::invalid_argument(path + ": " + what); }
  void write_root_attributes();
  void write_dataset(const std::string& name, const void* data, hid_t type,
                     const std::vector<int64_t>& shape);
};

void DumpWriter::Impl::write_root_attributes() {
  const hid_t f = file.get();
  h5::write_attr(f, "format", std::string(detail::kDumpFormatName));
  h5::write_attr(f, "format_version", detail::kDumpFormatVersion);
  h5::write_attr(f, "model", info.model);
  h5::write_attr(f, "num_layers", info.num_layers);
  h5::write_attr(f, "num_q_heads", info.num_q_heads);
  h5::write_attr(f, "num_kv_heads", info.num_kv_heads);
  h5::write_attr(f, "head_dim", info.head_dim);
  h5::write_attr(f, "num_tokens", info.tokens);
  h5::write_attr(f, "rope_theta", info.rope_theta);
  h5::write_attr(f, "rope_style", std::string(to_string(info.rope_style)));
  h5::write_attr(f, "k_after_rope", (int64_t)(info.k_after_rope ? 1 : 0));
  h5::write_attr(f, "dtype", std::string(to_string(info.dtype)));
  h5::write_attr(f, "source", info.source);
  if (!info.text.empty()) h5::write_attr(f, "text", info.text);
  if (!info.token_ids.empty()) {
    const hsize_t n = info.token_ids.size();
    Id space(H5Screate_simple(1, &n, nullptr));
    Id ds(H5Dcreate2(f, "token_ids", H5T_STD_I32LE, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    if (!ds.valid() ||
        H5Dwrite(ds.get(), H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, info.token_ids.data()) < 0)
      fail("cannot write /token_ids");
  }
}

void DumpWriter::Impl::write_dataset(const std::string& name, const void* data, hid_t type,
                                     const std::vector<int64_t>& shape) {
  const int64_t H = shape[0], T = shape[1], D = shape[2];
  const int64_t ct = std::min<int64_t>(T, std::max<int64_t>(1, options.chunk_tokens));
  const hsize_t dims[3] = {(hsize_t)H, (hsize_t)T, (hsize_t)D};
  const hsize_t chunk[3] = {1, (hsize_t)ct, (hsize_t)D};
  Id space(H5Screate_simple(3, dims, nullptr));
  Id lcpl(H5Pcreate(H5P_LINK_CREATE));
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  Id dcpl(H5Pcreate(H5P_DATASET_CREATE));
  H5Pset_chunk(dcpl.get(), 3, chunk);
  if (options.compress) {  // the pipeline readers will undo; the chunks are encoded below
    H5Pset_shuffle(dcpl.get());
    H5Pset_deflate(dcpl.get(), 1);
  }
  Id ds(H5Dcreate2(file.get(), name.c_str(), type, space.get(), lcpl.get(), dcpl.get(), H5P_DEFAULT));
  if (!ds.valid()) fail("cannot create dataset " + name);
  if (!options.compress) {
    errno = 0;
    if (H5Dwrite(ds.get(), type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
      throw_os_error(path + ": cannot write dataset " + name);
  } else {
    // Encode every chunk in parallel, then hand them to HDF5 in order (it is not thread-safe).
    const int elem = (int)H5Tget_size(type);
    const int64_t per_head = (T + ct - 1) / ct, n = H * per_head;
    const size_t chunk_bytes = (size_t)(ct * D * elem);
    std::vector<std::vector<uint8_t>> encoded(n);
    std::vector<uint32_t> masks(n);
    std::string error;
    // Threads only for work worth waking them: on a busy machine a team costs milliseconds.
#pragma omp parallel for schedule(dynamic) if (n * chunk_bytes >= (4u << 20))
    for (int64_t i = 0; i < n; ++i) {
      const int64_t h = i / per_head, t0 = (i % per_head) * ct, len = std::min(ct, T - t0);
      std::vector<uint8_t> raw(chunk_bytes, 0);  // the edge chunk is padded, as HDF5 stores it
      std::memcpy(raw.data(), static_cast<const uint8_t*>(data) + (h * T + t0) * D * elem, len * D * elem);
      try {
        encoded[i] = detail::encode_chunk(raw.data(), chunk_bytes, elem, masks[i]);
      } catch (const std::exception& e) {
#pragma omp critical
        error = e.what();
      }
    }
    if (!error.empty()) fail(name + ": " + error);
    for (int64_t i = 0; i < n; ++i) {
      const hsize_t offset[3] = {(hsize_t)(i / per_head), (hsize_t)((i % per_head) * ct), 0};
      errno = 0;
      if (H5Dwrite_chunk(ds.get(), H5P_DEFAULT, masks[i], offset, encoded[i].size(), encoded[i].data()) < 0)
        throw_os_error(path + ": cannot write a chunk of " + name);
    }
  }
  h5::write_attr(ds.get(), "dtype", std::string(to_string(info.dtype)));
}

DumpWriter::DumpWriter(const std::string& path, const DumpInfo& info, DumpWriteOptions options)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.path = path;
  m.info = info;
  m.options = options;
  info.validate(path);
  if (options.chunk_tokens <= 0)
    throw std::invalid_argument(path + ": chunk_tokens must be positive, got " +
                                std::to_string(options.chunk_tokens));
  h5::silence_errors();
  m.tmp = std::make_unique<TempFile>(path);
  m.file = Id(H5Fcreate(m.tmp->tmp().c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
  if (!m.file.valid())
    throw std::runtime_error("cannot create '" + m.tmp->tmp() + "' (HDF5, for " + path + ")");
  m.write_root_attributes();
}

DumpWriter::~DumpWriter() {
  if (impl_) impl_->file.reset();  // closed before its TempFile removes it
}

void DumpWriter::write(int64_t layer, Role role, const TensorView& x) {
  Impl& m = *impl_;
  const std::string name = detail::dataset_path(layer, role);
  if (m.committed) m.refuse("write of " + name + " after commit");
  if (layer < 0 || layer >= m.info.num_layers)
    m.refuse("layer " + std::to_string(layer) + " out of range [0, " + std::to_string(m.info.num_layers) +
             ")");
  if (role == Role::KPreRope && !m.info.has_k_pre_rope)
    m.refuse("k_pre_rope given but info.has_k_pre_rope is false");
  if (x.shape != m.info.shape(role))
    m.refuse(name + " has shape " + shape_string(x.shape) + ", expected " + shape_string(m.info.shape(role)));
  if (!m.written.insert({layer, role}).second) m.refuse(name + " written twice");
  check_finite(x, m.path + ": " + name);

  const int64_t n = x.numel();
  std::vector<float> f32;  // fp32 copy of fp16 input, only when the stored dtype needs one
  const float* src = static_cast<const float*>(x.data);
  if (x.dtype == DType::F16 && m.info.dtype != CaptureDtype::F16) {
    f32.resize(n);
    detail::half_to_float_n(static_cast<const uint16_t*>(x.data), f32.data(), n);
    src = f32.data();
  }
  switch (m.info.dtype) {
    case CaptureDtype::F32: m.write_dataset(name, src, H5T_IEEE_F32LE, x.shape); break;
    case CaptureDtype::F16: {
      std::vector<uint16_t> bits(n);
      if (x.dtype == DType::F16) {
        std::memcpy(bits.data(), x.data, n * sizeof(uint16_t));
      } else {
        detail::float_to_half_n(src, bits.data(), n);
        for (int64_t i = 0; i < n; ++i)
          if ((bits[i] & 0x7C00u) == 0x7C00u)
            m.refuse(name + ": value " + std::to_string(src[i]) + " at flat index " + std::to_string(i) +
                     " overflows float16 (the dump's dtype)");
      }
      Id t = h5::half_type();
      m.write_dataset(name, bits.data(), t.get(), x.shape);
      break;
    }
    case CaptureDtype::BF16: {
      std::vector<uint16_t> bits(n);
      for (int64_t i = 0; i < n; ++i) bits[i] = detail::float_to_bf16(src[i]);
      m.write_dataset(name, bits.data(), H5T_STD_U16LE, x.shape);
      break;
    }
  }
}

void DumpWriter::commit() {
  Impl& m = *impl_;
  if (m.committed) return;
  std::vector<Role> roles = {Role::Q, Role::K, Role::V};
  if (m.info.has_k_pre_rope) roles.push_back(Role::KPreRope);
  for (int64_t l = 0; l < m.info.num_layers; ++l)
    for (Role r : roles)
      if (!m.written.count({l, r}))
        m.fail("cannot commit: " + detail::dataset_path(l, r) + " was never written");
  errno = 0;
  if (H5Fclose(m.file.release()) < 0)
    throw_os_error(m.path + ": cannot finish writing '" + m.tmp->tmp() + "'");
  m.tmp->commit();
  m.committed = true;
}

}  // namespace kvlab
