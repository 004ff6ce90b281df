// Per-channel quantize of long groups (whole-axis INT8 and any G / 16 that is not a power of two
// up to 32) in one DRAM read. The two-pass path (channel_stats_regs, then channel_quant_regs
// with the params read back) reads the input twice, which caps it at (in + codes) / (2 in +
// codes) = 60% (fp16) / 56% (fp32) of copy. Here a cluster of kClusterCtas CTAs takes one
// (slice, group): each CTA reduces min/max of its token range into shared memory, the cluster
// merges the ranges over distributed shared memory (min/max of order keys: a total order, so
// the merge order does not matter), every CTA derives the params of all channels, and re-reads
// its own range for the codes while it is still in L2 (the first read keeps its lines, the
// second streams them out). Codes and params are the bytes of channel_quant_regs<PRE>.
// channel_quant_cluster_smem (the default where its range fits): the same steps with the range
// held in shared memory instead of L2 (cp.async, no registers while loads are in flight), on a
// block of channels whose rows are 128 bytes (fp32 in: 64 KB for a 4096-token group, 3 CTAs of
// 256 threads per SM) or 64 bytes (fp16 in: 32 KB, 6 CTAs of 128 threads), and codes without
// the clamp where the group's min and max show it idle (fastq.cuh, point 5);
// channel_quant_cluster (re-read from L2) stays for longer groups.
#include <cooperative_groups.h>

#include "fastq.cuh"

namespace cg = cooperative_groups;

namespace kvlab::gpu {
namespace {

constexpr int kClusterCtas = 8;  // portable cluster size (fewer for groups of fewer 16-token chunks)
constexpr int kClusterThreads = 256;
constexpr int kClusterMaxD = 512;

// Channel slot c's min and max over the group from the ordered-key min and max that each of the
// cluster's `ctas` CTAs holds in its shared memory for its range (phase 2 of both kernels).
__device__ __forceinline__ void cluster_minmax(cg::cluster_group& cluster, int32_t* kmn, int32_t* kmx, int c,
                                               int ctas, float& mn, float& mx) {
  int32_t a = ord_key(INFINITY), b = ord_key(-INFINITY);
  for (int r = 0; r < ctas; ++r) {
    a = min(a, *cluster.map_shared_rank(&kmn[c], r));
    b = max(b, *cluster.map_shared_rank(&kmx[c], r));
  }
  mn = key_float(a);
  mx = key_float(b);
}

// Unit = V channels (16 bytes of a row) x 16 tokens; channel chunks fastest, so a warp reads
// whole token rows. Range = this CTA's 16-token chunks [c_beg, c_end) of the group.
template <class In>
__device__ __forceinline__ void unit_rows(const In* __restrict__ x, const DevFormat& f, int64_t row0, int c0,
                                          bool keep, uint4 (&raw)[16]) {
  const In* base = x + row0 * f.D + c0;
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const uint4* p = reinterpret_cast<const uint4*>(base + (int64_t)i * f.D);
    raw[i] = keep ? __ldg(p) : __ldcs(p);
  }
}

template <class In, bool SYM, int BITS>
__global__ void __launch_bounds__(kClusterThreads, 2)
    channel_quant_cluster(const In* __restrict__ x, DevFormat f, DevQuant q, int mm, int allow_fast) {
  constexpr int V = 16 / (int)sizeof(In), NW = BITS / 2;
  __shared__ int32_t kmn[kClusterMaxD], kmx[kClusterMaxD];
  __shared__ float4 sqp[kClusterMaxD];
  cg::cluster_group cluster = cg::this_cluster();
  const int D = (int)f.D, CC = D / V, rank = (int)cluster.block_rank(), ctas = (int)cluster.num_blocks();
  const int64_t ng = blockIdx.x / ctas, n = ng / f.groups, g = ng % f.groups;
  const int64_t t0 = g * f.G;
  const int chunks = (int)(min((int64_t)f.G, f.T - t0) / 16);
  const int per = (chunks + ctas - 1) / ctas;
  const int c_beg = min(chunks, rank * per), c_end = min(chunks, c_beg + per);
  const int units = (c_end - c_beg) * CC;
  for (int c = threadIdx.x; c < D; c += blockDim.x) {
    kmn[c] = ord_key(INFINITY);
    kmx[c] = ord_key(-INFINITY);
  }
  __syncthreads();
  // 1. min/max of this CTA's range (hardware min/max or order keys, as channel_stats_regs).
  for (int u = threadIdx.x; u < units; u += blockDim.x) {
    const int cc = u % CC, tc = c_beg + u / CC;
    uint4 raw[16];
    unit_rows(x, f, n * f.T + t0 + tc * 16, cc * V, true, raw);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      float mn = INFINITY, mx = -INFINITY;
      int32_t a = ord_key(INFINITY), b = ord_key(-INFINITY);
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        const float v = row_value<In>(raw[i], j);
        if (mm) {
          mn = fminf(mn, v);
          mx = fmaxf(mx, v);
        } else {
          a = min(a, ord_key(v));
          b = max(b, ord_key(v));
        }
      }
      if (mm) {
        a = ord_key(mn);
        b = ord_key(mx);
      }
      atomicMin(&kmn[cc * V + j], a);
      atomicMax(&kmx[cc * V + j], b);
    }
  }
  cluster.sync();  // every CTA's range is in its shared memory
  // 2. merge the ranges; params of every channel (rank 0 stores them).
  for (int c = threadIdx.x; c < D; c += blockDim.x) {
    float mn, mx;
    cluster_minmax(cluster, kmn, kmx, c, ctas, mn, mx);
    const GroupParams p = params_of(mn, mx, BITS, SYM ? 1 : 0, f.half_params);
    if (rank == 0) write_params(q, (n * D + c) * f.groups + g, p, SYM ? 1 : 0, f.half_params);
    const QP qp = make_qp(p, allow_fast);
    sqp[c] = make_float4(qp.zero, qp.scale, qp.rcp, qp.fast);
  }
  cluster.sync();  // no CTA leaves while another reads its shared memory; sqp complete
  // 3. codes of this CTA's range, re-read (L2).
  for (int u = threadIdx.x; u < units; u += blockDim.x) {
    const int cc = u % CC, tc = c_beg + u / CC, c0 = cc * V;
    uint4 raw[16];
    unit_rows(x, f, n * f.T + t0 + tc * 16, c0, false, raw);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const float4 pv = sqp[c0 + j];
      const QP qp{pv.x, pv.y, pv.z, pv.w};
      float v[16];
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        v[i] = row_value<In>(raw[i], j);
      }
      uint32_t w[NW];
      pack_run<SYM, BITS, 16>(v, qp, GroupParams{qp.scale, SYM ? 0.0f : qp.zero}, w);
      uint8_t* dst = q.codes + (n * D + c0 + j) * f.row_bytes + (t0 + tc * 16) * BITS / 8;
      if constexpr (NW == 1)
        *reinterpret_cast<uint32_t*>(dst) = w[0];
      else if constexpr (NW == 2)
        *reinterpret_cast<uint2*>(dst) = make_uint2(w[0], w[1]);
      else
        *reinterpret_cast<uint4*>(dst) = make_uint4(w[0], w[1], w[2], w[3]);
    }
  }
}

__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
  const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(src) : "memory");
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
constexpr int kSmemStages = 4;   // commit groups: min/max of the first rows starts while the rest load
constexpr int kMinMaxBatch = 4;  // rows loaded before the first is used: 4 LDS.128 in flight

// f(row r) for r = r0, r0 + RL, ... < r1 in that order, in batches whose loads are all issued
// before f sees the first (the unrolled loop alone reloaded one register, waiting each time).
template <class F>
__device__ __forceinline__ void rows_batched(const uint4* col, int r0, int r1, int RL, int CPB, F&& f) {
  int r = r0;
  for (; r + (kMinMaxBatch - 1) * RL < r1; r += kMinMaxBatch * RL) {
    uint4 w[kMinMaxBatch];
#pragma unroll
    for (int k = 0; k < kMinMaxBatch; ++k) w[k] = col[(r + k * RL) * CPB];
#pragma unroll
    for (int k = 0; k < kMinMaxBatch; ++k) f(w[k]);
  }
  for (; r < r1; r += RL) f(col[r * CPB]);
}

// Codes of one unit (V channels x RS rows of the tile, raw) into V code rows from dst on.
// IN_RANGE: every channel's params have fast == 2 (no clamp, no per-channel branch).
template <class In, bool SYM, int BITS, int RS, bool IN_RANGE>
__device__ __forceinline__ void codes_unit(const uint4 (&raw)[RS], const float4* qps, uint8_t* dst,
                                           int64_t row_bytes) {
  constexpr int V = 16 / (int)sizeof(In), NWS = RS * BITS / 32;
#pragma unroll
  for (int j = 0; j < V; ++j) {
    const float4 pv = qps[j];
    const QP qp{pv.x, pv.y, pv.z, pv.w};
    float v[RS];
#pragma unroll
    for (int i = 0; i < RS; ++i) v[i] = row_value<In>(raw[i], j);
    uint32_t w[NWS];
    if (IN_RANGE || qp.fast == 2.0f)
      pack_run_in_range<SYM, BITS, RS>(v, qp, w);
    else
      pack_run<SYM, BITS, RS>(v, qp, GroupParams{qp.scale, SYM ? 0.0f : qp.zero}, w);
    if constexpr (NWS == 1)
      *reinterpret_cast<uint32_t*>(dst) = w[0];
    else if constexpr (NWS == 2)
      *reinterpret_cast<uint2*>(dst) = make_uint2(w[0], w[1]);
    else
      *reinterpret_cast<uint4*>(dst) = make_uint4(w[0], w[1], w[2], w[3]);
    dst += row_bytes;
  }
}

// Cluster of ctas CTAs per (slice, group, channel block of DB channels). CPB = DB / V chunks of
// 16 bytes per row, a power of two <= 8; tile = this CTA's rows x DB channels.
template <class In, bool SYM, int BITS>
__global__ void __launch_bounds__(kClusterThreads, 3)
    channel_quant_cluster_smem(const In* __restrict__ x, DevFormat f, DevQuant q, int DB, int mm,
                               int allow_fast) {
  constexpr int V = 16 / (int)sizeof(In);
  extern __shared__ __align__(16) uint8_t smem_raw[];
  uint4* tile = reinterpret_cast<uint4*>(smem_raw);
  __shared__ int32_t kmn[128 / sizeof(In)], kmx[128 / sizeof(In)];
  __shared__ float4 sqp[128 / sizeof(In)];
  cg::cluster_group cluster = cg::this_cluster();
  const int D = (int)f.D, CPB = DB / V, nblk = D / DB;
  const int rank = (int)cluster.block_rank(), ctas = (int)cluster.num_blocks();
  const int64_t cid = blockIdx.x / ctas, ng = cid / nblk, n = ng / f.groups, g = ng % f.groups;
  const int cb = (int)(cid % nblk);
  const int64_t t0 = g * f.G;
  const int chunks = (int)(min((int64_t)f.G, f.T - t0) / 16);
  const int per = (chunks + ctas - 1) / ctas;
  const int c_beg = min(chunks, rank * per), c_end = min(chunks, c_beg + per);
  const int rows = (c_end - c_beg) * 16;
  const In* src = x + (n * f.T + t0 + c_beg * 16) * D + cb * DB;
  // Thread = chunk cc of rows rl, rl + RL, ... in every step (CPB divides the block).
  const int cc = threadIdx.x % CPB, rl = threadIdx.x / CPB, RL = blockDim.x / CPB;
  for (int c = threadIdx.x; c < DB; c += blockDim.x) {
    kmn[c] = ord_key(INFINITY);
    kmx[c] = ord_key(-INFINITY);
  }
  // 0. the range into shared memory, in kSmemStages row slices (one commit group each)
  const int srows = ((rows / 16 + kSmemStages - 1) / kSmemStages) * 16;
  {
    const In* sp = src + (int64_t)rl * D + cc * V;
    uint4* dp = tile + rl * CPB + cc;
    int r = rl;
#pragma unroll
    for (int st = 0; st < kSmemStages; ++st) {
      for (const int r1 = min(rows, (st + 1) * srows); r < r1; r += RL, sp += (int64_t)RL * D, dp += RL * CPB)
        cp_async16(dp, sp);
      asm volatile("cp.async.commit_group;\n" ::: "memory");
    }
  }
  // 1. min/max as each slice lands
  float mn[V], mx[V];
  int32_t kn[V], kx[V];
  __half2 hn[4], hx[4];
#pragma unroll
  for (int j = 0; j < V; ++j) {
    mn[j] = INFINITY;
    mx[j] = -INFINITY;
    kn[j] = ord_key(INFINITY);
    kx[j] = ord_key(-INFINITY);
  }
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    hn[k] = __halves2half2(__ushort_as_half(0x7C00), __ushort_as_half(0x7C00));
    hx[k] = __halves2half2(__ushort_as_half(0xFC00), __ushort_as_half(0xFC00));
  }
  const bool h2 = sizeof(In) == 2 && mm;
  const uint4* col = tile + cc;
#pragma unroll
  for (int st = 0; st < kSmemStages; ++st) {
    if (st == 0) cp_async_wait<kSmemStages - 1>();
    if (st == 1) cp_async_wait<kSmemStages - 2>();
    if (st == 2) cp_async_wait<kSmemStages - 3>();
    if (st == 3) cp_async_wait<0>();
    __syncthreads();  // this slice from every thread's copies (and the kmn / kmx init)
    const int r0 = min(rows, st * srows) + rl, r1 = min(rows, (st + 1) * srows);
    if (h2) {
      rows_batched(col, r0, r1, RL, CPB, [&](const uint4& w) {
        const uint32_t u[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          hn[k] = __hmin2(hn[k], *reinterpret_cast<const __half2*>(&u[k]));
          hx[k] = __hmax2(hx[k], *reinterpret_cast<const __half2*>(&u[k]));
        }
      });
    } else {
      rows_batched(col, r0, r1, RL, CPB, [&](const uint4& w) {
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const float v = row_value<In>(w, j);
          if (mm) {
            mn[j] = fminf(mn[j], v);
            mx[j] = fmaxf(mx[j], v);
          } else {
            kn[j] = min(kn[j], ord_key(v));
            kx[j] = max(kx[j], ord_key(v));
          }
        }
      });
    }
  }
  if (h2) {
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      mn[2 * k] = __low2float(hn[k]);
      mn[2 * k + 1] = __high2float(hn[k]);
      mx[2 * k] = __low2float(hx[k]);
      mx[2 * k + 1] = __high2float(hx[k]);
    }
  }
#pragma unroll
  for (int j = 0; j < V; ++j) {
    int32_t a = mm ? ord_key(mn[j]) : kn[j], b = mm ? ord_key(mx[j]) : kx[j];
    for (int o = CPB; o < 32; o <<= 1) {  // lanes with the same chunk (CPB divides 32)
      a = min(a, __shfl_xor_sync(0xffffffffu, a, o));
      b = max(b, __shfl_xor_sync(0xffffffffu, b, o));
    }
    if ((threadIdx.x & 31) < CPB) {
      atomicMin(&kmn[cc * V + j], a);
      atomicMax(&kmx[cc * V + j], b);
    }
  }
  cluster.sync();  // every CTA's range is in its shared memory
  // 2. merge the ranges; params of the block's channels (rank 0 stores them)
  for (int c = threadIdx.x; c < DB; c += blockDim.x) {
    float mn, mx;
    cluster_minmax(cluster, kmn, kmx, c, ctas, mn, mx);
    const GroupParams p = params_of(mn, mx, BITS, SYM ? 1 : 0, f.half_params);
    if (rank == 0) write_params(q, (n * D + cb * DB + c) * f.groups + g, p, SYM ? 1 : 0, f.half_params);
    const QP qp = make_qp(p, allow_fast);
    // fast 2: no element of the group needs the clamp (fastq.cuh, point 5)
    const float fast = qp.fast != 0.0f && codes_in_range<SYM, BITS>(mn, mx, qp) ? 2.0f : qp.fast;
    sqp[c] = make_float4(qp.zero, qp.scale, qp.rcp, fast);
  }
  // No CTA may leave while another reads its shared memory: arrive here (after this CTA's last
  // remote read), wait at the end, so the codes step does not wait for the slowest CTA.
  __syncthreads();  // sqp complete
  __cluster_barrier_arrive();
  // 3. codes from shared memory: unit = V channels x RS rows (8 where whole words allow: fewer
  // registers for 3 CTAs per SM); one branch per unit where all V channels need no clamp
  constexpr int RS = BITS == 2 ? 16 : 8;
  const int c0 = cc * V;
  bool in_range = true;
#pragma unroll
  for (int j = 0; j < V; ++j) in_range &= sqp[c0 + j].w == 2.0f;
  for (int tr = rl; tr < rows / RS; tr += RL) {
    uint4 raw[RS];
#pragma unroll
    for (int i = 0; i < RS; ++i) raw[i] = tile[(tr * RS + i) * CPB + cc];
    uint8_t* dst = q.codes + (n * D + cb * DB + c0) * f.row_bytes + (t0 + c_beg * 16 + tr * RS) * BITS / 8;
    if (in_range)
      codes_unit<In, SYM, BITS, RS, true>(raw, sqp + c0, dst, f.row_bytes);
    else
      codes_unit<In, SYM, BITS, RS, false>(raw, sqp + c0, dst, f.row_bytes);
  }
  __cluster_barrier_wait();
}

// Channels per block of the smem kernel: rows of at most row_bytes (128 or 64), DB / V a power of two.
template <class In>
int smem_block_channels(int64_t D, int row_bytes) {
  int db = row_bytes / (int)sizeof(In);
  while (D % db != 0) db /= 2;
  return db;
}
constexpr int64_t kClusterSmemMax = 72 * 1024;  // 3 CTAs per SM

// The smem kernel where the range fits; false: not taken.
template <class In, bool SYM, int BITS>
bool launch_cluster_smem(const DevFormat& f, const In* x, DevQuant q, cudaStream_t s, const KernelConfig& cfg,
                         int ctas) {
  // Half-width rows: half the threads and half the shared memory per CTA, so twice the CTAs per SM
  // (fp16 input: 84.3% of copy against 82.9% on the H100; fp32: 85.6% against 97.1%).
  const bool narrow = cfg.cluster_row_bytes == 0 ? sizeof(In) == 2 : cfg.cluster_row_bytes == 64;
  const int db = smem_block_channels<In>(f.D, narrow ? 64 : 128);
  const int64_t per = (f.G / 16 + ctas - 1) / ctas, bytes = per * 16 * db * (int64_t)sizeof(In);
  if (!cfg.cluster_smem || bytes > kClusterSmemMax) return false;
  auto kern = channel_quant_cluster_smem<In, SYM, BITS>;
  cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
  cudaFuncSetAttribute(kern, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
  cudaLaunchConfig_t lc = {};
  lc.gridDim = dim3((unsigned)(f.N * f.groups * (f.D / db) * ctas));
  lc.blockDim = dim3(narrow ? kClusterThreads / 2 : kClusterThreads);
  lc.dynamicSmemBytes = (size_t)bytes;
  lc.stream = s;
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeClusterDimension;
  at[0].val.clusterDim.x = (unsigned)ctas;
  at[0].val.clusterDim.y = 1;
  at[0].val.clusterDim.z = 1;
  lc.attrs = at;
  lc.numAttrs = 1;
  const cudaError_t e =
      cudaLaunchKernelEx(&lc, kern, x, f, q, db, cfg.hw_minmax ? 1 : 0, cfg.fast_div ? 1 : 0);
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("kvlab-gpu: launch of channel_quant_cluster_smem failed: ") +
                             cudaGetErrorString(e));
  check_launch("channel_quant_cluster_smem");
  return true;
}

template <class In, bool SYM, int BITS>
const char* launch_cluster(const DevFormat& f, const In* x, DevQuant q, cudaStream_t s,
                           const KernelConfig& cfg) {
  auto kern = channel_quant_cluster<In, SYM, BITS>;
  const int ctas = (int)std::min<int64_t>(kClusterCtas, f.G / 16);
  if (launch_cluster_smem<In, SYM, BITS>(f, x, q, s, cfg, ctas)) return "cluster-smem";
  cudaLaunchConfig_t lc = {};
  lc.gridDim = dim3((unsigned)(f.N * f.groups * ctas));
  lc.blockDim = dim3(kClusterThreads);
  lc.stream = s;
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeClusterDimension;
  at[0].val.clusterDim.x = (unsigned)ctas;
  at[0].val.clusterDim.y = 1;
  at[0].val.clusterDim.z = 1;
  lc.attrs = at;
  lc.numAttrs = 1;
  // The second read hits L2 only while the groups in flight fit in it: 2 CTAs per SM unless
  // that puts more than 40 MB of groups in flight (fp32 whole-axis slices of 4096 x 128), then
  // shared memory that leaves room for 1.
  const int64_t group_bytes = (int64_t)f.G * f.D * (int64_t)sizeof(In);
  int per_sm = cfg.cluster_ctas_per_sm;
  if (per_sm == 0) per_sm = group_bytes * 2 * sm_count() / ctas > (int64_t(40) << 20) ? 1 : 2;
  if (per_sm == 1) {
    lc.dynamicSmemBytes = 120 * 1024;
    cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)lc.dynamicSmemBytes);
  }
  const cudaError_t e = cudaLaunchKernelEx(&lc, kern, x, f, q, cfg.hw_minmax ? 1 : 0, cfg.fast_div ? 1 : 0);
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("kvlab-gpu: launch of channel_quant_cluster failed: ") +
                             cudaGetErrorString(e));
  check_launch("channel_quant_cluster");
  return "cluster";
}

template <class In>
const char* dispatch(const DevFormat& f, const In* x, DevQuant q, cudaStream_t s, const KernelConfig& cfg) {
  if (f.sym) {
    switch (f.bits) {
      case 2: return launch_cluster<In, true, 2>(f, x, q, s, cfg);
      case 4: return launch_cluster<In, true, 4>(f, x, q, s, cfg);
      default: return launch_cluster<In, true, 8>(f, x, q, s, cfg);
    }
  }
  switch (f.bits) {
    case 2: return launch_cluster<In, false, 2>(f, x, q, s, cfg);
    case 4: return launch_cluster<In, false, 4>(f, x, q, s, cfg);
    default: return launch_cluster<In, false, 8>(f, x, q, s, cfg);
  }
}

}  // namespace

// Called by quantize_channel where the register-tile kernels fit (2/4/8 bits, T and G
// multiples of 16, D a multiple of the lane's channels, 16-byte aligned input) and the group
// needs the two-pass path. nullptr: not taken (config or shape), the caller goes on.
const char* quantize_channel_cluster(const DevFormat& f, const void* x, InType in, DevQuant q, cudaStream_t s,
                                     const KernelConfig& cfg) {
  if (!cfg.single_read || f.D > kClusterMaxD) return nullptr;
  if (in == InType::F16) return dispatch(f, static_cast<const uint16_t*>(x), q, s, cfg);
  return dispatch(f, static_cast<const float*>(x), q, s, cfg);
}

}  // namespace kvlab::gpu
