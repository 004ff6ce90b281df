#include "group.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

namespace kvlab::detail {

void run_group(const GroupJob& g, GroupResult& result, float* out_o, AttentionTimes* times) {
  if (g.tiles.query_tile < 1 || g.tiles.key_tile < 1)
    throw std::invalid_argument("attention tiles must be >= 1 (query_tile " +
                                std::to_string(g.tiles.query_tile) + ", key_tile " +
                                std::to_string(g.tiles.key_tile) + ")");
  // Tiles larger than the queries or keys there are change nothing but the buffers they size
  // (--key-tile 2^62 would overflow them): cap them.
  const int64_t max_keys = g.N > 0 ? g.pos[g.N - 1] + 1 : 1;
  const int64_t Bq = std::min(g.tiles.query_tile, std::max<int64_t>(g.N, 1)), tiles = (g.N + Bq - 1) / Bq,
                H = g.heads, D = g.D;
  const int M = (int)g.methods.size();
  std::vector<TileResult> parts(tiles);
#pragma omp parallel
  {
    TileKernel kernel;
    AttentionTimes local;
    AlignedVector<float> q, o;  // stacked rows: row i * H + h is query first + i of head h
    std::vector<int64_t> pos;
    // Latest tiles first: they attend to the most keys, so dynamic scheduling balances.
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < tiles; ++t) {
      const int64_t tile = tiles - 1 - t, first = tile * Bq, n = std::min(Bq, g.N - first), B = n * H;
      q.resize(B * D);
      pos.resize(B);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t h = 0; h < H; ++h) {
          std::copy_n(g.q + (h * g.N + first + i) * D, D, &q[(i * H + h) * D]);
          pos[i * H + h] = g.pos[first + i];
        }
      TileJob job;
      job.q = q.data();
      job.pos = pos.data();
      job.B = B;
      job.D = D;
      job.heads = H;
      job.k = g.k;
      job.v = g.v;
      job.methods = g.methods.data();
      job.M = M;
      job.key_tile = std::min(g.tiles.key_tile, max_keys);
      job.topk = g.topk;
      if (out_o) o.resize(B * D);
      kernel.run(job, parts[tile], out_o ? o.data() : nullptr, times ? &local : nullptr);
      if (out_o)
        for (int64_t i = 0; i < n; ++i)
          for (int64_t h = 0; h < H; ++h)
            std::copy_n(&o[(i * H + h) * D], D, out_o + (h * g.N + first + i) * D);
    }
    if (times) {
#pragma omp critical(kvlab_eval_times)
      times->merge(local);
    }
  }
  // Fixed order: tile by tile.
  result.stats.assign(M, std::vector<AttnStats>(H));
  result.ref_sq.assign(H, 0.0);
  for (int64_t tile = 0; tile < tiles; ++tile) {
    const TileResult& p = parts[tile];
    for (int64_t h = 0; h < H; ++h) {
      result.ref_sq[h] += p.ref_sq[h];
      for (int m = 0; m < M; ++m) result.stats[m][h].merge(p.stats[m][h]);
    }
  }
}

}  // namespace kvlab::detail

namespace kvlab {

void cpu_attention_unit(const AttentionUnit& unit, AttentionUnitResult& result, AttentionTimes* times) {
  detail::run_group(unit, result, nullptr, times);
}

}  // namespace kvlab

namespace kvlab::detail {

void gather_scaled(const float* src, const std::vector<int64_t>& pos, int64_t D, float* dst) {
  const float s = (float)(1.0 / std::sqrt((double)D));
  for (size_t i = 0; i < pos.size(); ++i) {
    const float* from = src + pos[i] * D;
    float* to = dst + (int64_t)i * D;
    for (int64_t d = 0; d < D; ++d) to[d] = from[d] * s;  // from >= to: safe in place
  }
}

}  // namespace kvlab::detail
