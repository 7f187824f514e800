// Attention of a forward pass's rows (runtime/forward_attention.hpp): over the paged
// cache and the compressed views of draft rows, or over KV a provider streams in, on
// the CPU or the model's AttentionBackend; with the rows kept on the device
// (DeviceRows), queries and outputs stay there unless the CPU attends for a row.
#include "runtime/forward_attention.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>

#include "kernels/cpu/attention.hpp"
#include "kernels/error.hpp"
#include "kvtiers/view_attention.hpp"
#include "runtime/attention_backend.hpp"
#include "runtime/device_rows.hpp"
#include "runtime/prefill_stats.hpp"
#include "runtime/view_rows_plan.hpp"

namespace vc {

namespace {

// KV bytes (K and V) of one tile of the tiled attention: small enough to stay in a
// core's L2 cache while every row of the pass reads it.
constexpr size_t kTileBytes = size_t(256) << 10;

// Blocks per tile for KV shaped like `kv`.
size_t tile_blocks(const cpu::PagedKv& kv) {
  const size_t block_bytes = 2 * kv.block_tokens * kv.kv_heads * kv.head_dim * dtype_size(kv.dtype);
  return std::max<size_t>(1, kTileBytes / std::max<size_t>(1, block_bytes));
}

// Rows [r0, r0 + M) (states begun) merge blocks [b_begin, b_end) of `kv` a tile of
// blocks at a time, every row reading a tile while it is in cache, rows split across
// the pool in groups that share passes over a block (AttentionRowState::add_rows:
// several rows' query heads of a KV head at once, when a KV head has few of them).
// Per row the blocks still come in position order, so each row's bits are those of
// one pass over the whole range (AttentionRowState).
void attend_tiles(const cpu::PagedKv& kv, size_t r0, size_t M, size_t b_begin, size_t b_end,
                  Workspace& ws) {
  const size_t tile = tile_blocks(kv);
  // Groups of at most rows-per-pass rows, no larger than keeps every thread busy,
  // their sizes differing by one at most (the bits do not depend on the grouping).
  const size_t threads = size_t(std::max(1, ws.pool().threads()));
  const size_t rp =
      M > 1 ? std::min(cpu::attention_rows_per_pass(ws.attn_states[r0].heads(), kv.kv_heads),
                       (M + threads - 1) / threads)
            : 1;
  const size_t groups = (M + rp - 1) / rp;
  for (size_t b0 = b_begin; b0 < b_end; b0 += tile) {
    const size_t b1 = std::min(b_end, b0 + tile);
    ws.pool().parallel_for(groups, 1, [&](size_t b, size_t e) {
      std::array<cpu::AttentionRowState*, cpu::kAttentionMaxRowsPerPass> rows{};
      for (size_t i = b; i < e; ++i) {
        const size_t m0 = i * M / groups, m1 = (i + 1) * M / groups;
        for (size_t m = m0; m < m1; ++m) rows[m - m0] = &ws.attn_states[r0 + m];
        cpu::AttentionRowState::add_rows({rows.data(), m1 - m0}, kv, b0, b1);
      }
    });
  }
}

// Rows [r0, r1) of the pass, one sequence's and none over a view, attend over the
// sequence's cache a tile of blocks at a time (attend_tiles): a prefill chunk or a
// verify pass then reads each tile of the KV from DRAM once, not once per row. Each
// row's bits are those of attention_row over the same KV (AttentionRowState).
void attend_run_tiled(const ModelConfig& c, const PagedKvCache& cache, size_t l,
                      std::span<const ForwardRow> rows, size_t r0, size_t r1, float scale,
                      Workspace& ws, float* max_sum) {
  const size_t nh = size_t(c.num_heads), qd = nh * size_t(c.head_dim);
  const cpu::PagedKv kv = cache.view(l, *rows[r0].seq);
  if (ws.attn_states.size() < r1) ws.attn_states.resize(r1);
  size_t blocks = 0;
  for (size_t m = r0; m < r1; ++m) {
    ws.attn_states[m].begin(ws.q.data() + m * qd, nh, kv, size_t(ws.positions[m]) + 1, scale);
    blocks = std::max(blocks, ws.attn_states[m].blocks());
  }
  attend_tiles(kv, r0, r1 - r0, 0, blocks, ws);
  for (size_t m = r0; m < r1; ++m) {
    ws.attn_states[m].finish(ws.attn.data() + m * qd);
    if (max_sum != nullptr) ws.attn_states[m].max_sum(max_sum + m * nh * 2);
  }
}

// Rows `idx` of the pass on a device: their queries gathered into one batch,
// attend(q, out) run over it, its outputs scattered back to the rows' places. With
// the rows on the device the gathering happens there (none when idx is every row).
template <class Attend>
void attend_gathered(std::span<const size_t> idx, size_t qd, Workspace& ws, RowsIo& io,
                     Attend&& attend) {
  if (DeviceRows* dev = io.rows) {
    const size_t n = idx.size();
    if (n == io.M) {  // every row, in order
      dev->sync();
      attend(dev->at(DeviceRows::q), dev->at(DeviceRows::attn));
      return;
    }
    dev->reserve(DeviceRows::gq, n * qd);
    dev->reserve(DeviceRows::gout, n * qd);
    dev->gather(DeviceRows::q, idx, qd, DeviceRows::gq);
    dev->sync();
    attend(dev->at(DeviceRows::gq), dev->at(DeviceRows::gout));
    dev->scatter(DeviceRows::gout, idx, qd, DeviceRows::attn);
    return;
  }
  ws.device_q.resize(idx.size() * qd);
  ws.device_out.resize(idx.size() * qd);
  for (size_t i = 0; i < idx.size(); ++i)
    std::copy_n(ws.q.data() + idx[i] * qd, qd, ws.device_q.data() + i * qd);
  attend(ws.device_q.data(), ws.device_out.data());
  for (size_t i = 0; i < idx.size(); ++i)
    std::copy_n(ws.device_out.data() + i * qd, qd, ws.attn.data() + idx[i] * qd);
}

// The full-KV rows of a pass over the cache (those without a view) on the model's
// device, over its copy of the cache.
void attend_cached_on_device(AttentionBackend& be, const ModelConfig& c, const PagedKvCache& cache,
                             size_t l, std::span<const ForwardRow> rows, float scale, Workspace& ws,
                             RowsIo& io) {
  const size_t qd = size_t(c.num_heads) * size_t(c.head_dim);
  std::vector<size_t>& idx = ws.device_rows;
  std::vector<int32_t>& n_ctx = ws.device_ctx;
  std::vector<const KvSequence*>& seqs = ws.device_seqs;
  idx.clear(), n_ctx.clear(), seqs.clear();
  for (size_t m = 0; m < rows.size(); ++m)
    if (rows[m].view == nullptr)
      idx.push_back(m), n_ctx.push_back(ws.positions[m] + 1), seqs.push_back(rows[m].seq);
  if (idx.empty()) return;
  attend_gathered(idx, qd, ws, io, [&](const float* q, float* out) {
    be.attend_cached(cache, l, size_t(c.num_heads), seqs, n_ctx, scale, q, out);
  });
}

// The draft rows of a pass (those over a view) on the model's device, when their
// views are in a form it reads (plan_view_rows): true when the device took them all (or
// there are none), false when they stay on the CPU.
bool attend_views_on_device(AttentionBackend& be, const ModelConfig& c, const PagedKvCache& cache,
                            size_t l, std::span<const ForwardRow> rows, float scale, Workspace& ws,
                            RowsIo& io) {
  const size_t qd = size_t(c.num_heads) * size_t(c.head_dim);
  std::vector<size_t>& idx = ws.device_rows;
  std::vector<int32_t>& n_ctx = ws.device_ctx;
  std::vector<const KvSequence*>& seqs = ws.device_seqs;
  std::vector<const CompressedView*>& views = ws.device_views;
  idx.clear(), n_ctx.clear(), seqs.clear(), views.clear();
  for (size_t m = 0; m < rows.size(); ++m)
    if (rows[m].view != nullptr) {
      idx.push_back(m), n_ctx.push_back(ws.positions[m] + 1), seqs.push_back(rows[m].seq);
      views.push_back(rows[m].view);
    }
  if (idx.empty()) return true;
  const std::optional<ViewRowsPlan> plan = plan_view_rows(cache, l, views, seqs, n_ctx);
  if (!plan) return false;
  attend_gathered(idx, qd, ws, io, [&](const float* q, float* out) {
    be.attend_views(cache, l, size_t(c.num_heads), *plan, n_ctx, scale, q, out);
  });
  return true;
}

}  // namespace

void RowsIo::q_to_host(Workspace& ws) {
  if (rows == nullptr || q_on_host) return;
  rows->download(DeviceRows::q, 0, M * qd, ws.q.data());
  q_on_host = true;
}

void RowsIo::attended_on_host(size_t r0, size_t r1) {
  if (rows == nullptr) return;
  for (size_t m = r0; m < r1; ++m) host_rows.push_back(m);
}

void RowsIo::upload_host_rows(const Workspace& ws) {
  if (rows == nullptr || host_rows.empty()) return;
  std::sort(host_rows.begin(), host_rows.end());
  // Runs of consecutive rows go up in one copy each.
  for (size_t i = 0; i < host_rows.size();) {
    size_t j = i + 1;
    while (j < host_rows.size() && host_rows[j] == host_rows[j - 1] + 1) ++j;
    const size_t r0 = host_rows[i], n = j - i;
    rows->upload(ws.attn.data() + r0 * qd, n * qd, DeviceRows::attn, r0 * qd);
    i = j;
  }
  host_rows.clear();
}

// Runs of rows of one sequence without views go tile by tile (attend_run_tiled);
// the rows the device takes: attend_cached_on_device, attend_views_on_device.
void attend_cached(const ModelConfig& c, const PagedKvCache& cache, size_t l,
                   std::span<const ForwardRow> rows, float scale, Workspace& ws,
                   float* max_sum, AttentionBackend* device, RowsIo& io) {
  const size_t M = rows.size();
  const size_t nh = size_t(c.num_heads), hd = size_t(c.head_dim);
  const size_t qd = nh * hd;
  const std::vector<int32_t>& pos = ws.positions;
  const bool cpu_full = device == nullptr || max_sum != nullptr;
  const bool views_on_device =
      !cpu_full && attend_views_on_device(*device, c, cache, l, rows, scale, ws, io);
  thread_local std::vector<size_t> alone_rows;  // rows attended one by one
  std::vector<size_t>& alone = alone_rows;  // the pool's threads read the caller's
  alone.clear();
  for (size_t m = 0; m < M;) {
    size_t e = m + 1;
    if (rows[m].view == nullptr)
      while (e < M && rows[e].view == nullptr && rows[e].seq == rows[m].seq) ++e;
    if (rows[m].view == nullptr ? !cpu_full : views_on_device) {
      // on the device (the full-KV rows below, the draft rows above)
    } else {
      io.q_to_host(ws);
      // The device's outputs replace the CPU's for the full-KV rows it attends too.
      if (rows[m].view != nullptr || device == nullptr) io.attended_on_host(m, e);
      if (e - m >= 2) attend_run_tiled(c, cache, l, rows, m, e, scale, ws, max_sum);
      else alone.push_back(m);
    }
    m = e;
  }
  auto attend = [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      const size_t m = alone[i];
      const CompressedView* cv = rows[m].view;
      if (cv == nullptr) {
        // A lone row splits its KV heads across the pool (bit-identical either way).
        cpu::attention_row(ws.q.data() + m * qd, nh, cache.view(l, *rows[m].seq),
                           size_t(pos[m]) + 1, scale, ws.attn.data() + m * qd,
                           alone.size() == 1 ? &ws.pool() : nullptr,
                           max_sum != nullptr ? max_sum + m * nh * 2 : nullptr);
        continue;
      }
      // Over the view's kept rows (in place, from their codes or decoded a block
      // at a time), then the tail; a lone row splits its KV heads here too.
      attend_view_row(*cv, l, ws.q.data() + m * qd, nh, cache.view(l, *rows[m].seq),
                      size_t(pos[m]) + 1, scale, ws.attn.data() + m * qd,
                      alone.size() == 1 ? &ws.pool() : nullptr);
    }
  };
  if (alone.size() > 1) ws.pool().parallel_for(alone.size(), 1, attend);
  else attend(0, alone.size());
  if (device != nullptr) attend_cached_on_device(*device, c, cache, l, rows, scale, ws, io);
}

// Each chunk in tiles of blocks on the CPU: each row's state merges the blocks as
// attention_row would merge them. On the device, the bits of the device over a cache
// holding the same KV (attend_cached_on_device).
void attend_streamed(const ModelConfig& c, LayerKvProvider& provider, size_t l,
                     std::span<const ForwardRow> rows, size_t r0, float scale, Workspace& ws,
                     AttentionBackend* device, RowsIo& io) {
  const size_t M = rows.size(), nh = size_t(c.num_heads), qd = nh * size_t(c.head_dim);
  const std::vector<int32_t>& pos = ws.positions;
  const cpu::PagedKv shape = provider.shape();
  const size_t chunks = provider.chunks();
  // Statistics that read the layer's keys need it staged whole (and each row's
  // softmax maximum and sum, known once its attention is done); the others read
  // the queries only. Only a pass of one provider gathers them (r0 = 0).
  const bool stats_keys = ws.stats != nullptr && ws.stats->needs_keys();
  if (stats_keys && chunks != 1)
    throw Error("forward: these prefill statistics need whole layers staged");
  const bool on_cpu = device == nullptr || stats_keys;
  if (on_cpu || ws.stats != nullptr) io.q_to_host(ws);
  if (on_cpu && device == nullptr) io.attended_on_host(r0, r0 + M);
  if (on_cpu)
    for (size_t m = r0; m < r0 + M; ++m)
      ws.attn_states[m].begin(ws.q.data() + m * qd, nh, shape, size_t(pos[m]) + 1, scale);
  std::unique_ptr<AttentionBackend::Pass> pass;
  if (device != nullptr) {
    // Rows of one sequence at consecutive positions: the last reads the most blocks.
    ws.device_ctx.resize(M);
    for (size_t m = 0; m < M; ++m) ws.device_ctx[m] = pos[r0 + m] + 1;
    const size_t longest = size_t(*std::max_element(ws.device_ctx.begin(), ws.device_ctx.end()));
    pass = device->begin(nh, shape, ws.device_ctx,
                         (longest + shape.block_tokens - 1) / shape.block_tokens, scale);
    // The queries first: the pass may attend chunk by chunk as they are added.
    if (DeviceRows* dev = io.rows) {
      dev->sync();
      pass->queries(dev->at(DeviceRows::q) + r0 * qd);
    } else {
      pass->queries(ws.q.data() + r0 * qd);
    }
  }
  for (size_t c = 0; c < chunks; ++c) {
    const KvChunk ch = provider.acquire(l, c);
    if (ws.stats != nullptr && !stats_keys && c == 0)
      ws.stats->observe(l, rows, ws.q.data(), nullptr, nullptr);
    if (pass) pass->add(0, M, ch.kv, ch.block_begin, ch.block_end, ch.keep);
    if (!on_cpu) {
      // on the device
    } else if (M == 1) {
      ws.attn_states[r0].add(ch.kv, ch.block_begin, ch.block_end, &ws.pool());
    } else {
      attend_tiles(ch.kv, r0, M, ch.block_begin, ch.block_end, ws);
    }
    if (stats_keys) {
      ws.attn_max_sum.resize(M * nh * 2);
      for (size_t m = 0; m < M; ++m) ws.attn_states[m].max_sum(ws.attn_max_sum.data() + m * nh * 2);
      ws.stats->observe(l, rows, ws.q.data(), &ch.kv, ws.attn_max_sum.data());
    }
    provider.release(l, c);
  }
  if (on_cpu)
    for (size_t m = r0; m < r0 + M; ++m) ws.attn_states[m].finish(ws.attn.data() + m * qd);
  if (!pass) return;
  if (DeviceRows* dev = io.rows) {
    pass->run(dev->at(DeviceRows::q) + r0 * qd, dev->at(DeviceRows::attn) + r0 * qd);
  } else {
    pass->run(ws.q.data() + r0 * qd, ws.attn.data() + r0 * qd);
  }
}

void attend_layer(const Model& model, std::span<const ForwardRow> rows, PagedKvCache& cache,
                  size_t l, Workspace& ws, RowsIo& io) {
  const ModelConfig& c = model.config();
  const size_t M = rows.size(), nh = size_t(c.num_heads);
  const size_t kvd = size_t(c.num_kv_heads) * size_t(c.head_dim);
  const float scale = float(1.0 / std::sqrt(double(c.head_dim)));
  const std::vector<int32_t>& pos = ws.positions;
  AttentionBackend* device = model.attention_backend();
  if (!ws.providers.empty()) {
    if (ws.attn_states.size() < M) ws.attn_states.resize(M);
    for (const ProvidedRows& p : ws.providers) {
      for (size_t m = p.begin; m < p.end; ++m)
        p.provider->write(l, size_t(pos[m]), ws.k.data() + m * kvd, ws.v.data() + m * kvd);
      attend_streamed(c, *p.provider, l, rows.subspan(p.begin, p.end - p.begin), p.begin, scale,
                      ws, device, io);
    }
  } else {
    for (size_t m = 0; m < M; ++m)
      cache.write(l, *rows[m].seq, size_t(pos[m]), ws.k.data() + m * kvd, ws.v.data() + m * kvd);
    if (device != nullptr) {  // its copy of the cache takes the same rows
      ws.device_seqs.clear();
      for (size_t m = 0; m < M; ++m) ws.device_seqs.push_back(rows[m].seq);
      DeviceRows* dev = io.rows;
      device->wrote(cache, l, ws.device_seqs, pos, dev != nullptr ? dev->at(DeviceRows::k) : ws.k.data(),
                    dev != nullptr ? dev->at(DeviceRows::v) : ws.v.data());
    }
    const bool stats_keys = ws.stats != nullptr && ws.stats->needs_keys();
    if (stats_keys) ws.attn_max_sum.resize(M * nh * 2);
    attend_cached(c, cache, l, rows, scale, ws, stats_keys ? ws.attn_max_sum.data() : nullptr,
                  device, io);
    if (ws.stats != nullptr) {
      io.q_to_host(ws);
      const cpu::PagedKv kv = cache.view(l, *rows[0].seq);
      ws.stats->observe(l, rows, ws.q.data(), stats_keys ? &kv : nullptr,
                        stats_keys ? ws.attn_max_sum.data() : nullptr);
    }
  }
  io.upload_host_rows(ws);
}

// The providers' ranges must cover rows [0, M) in order.
void check_providers(const Workspace& ws, size_t M) {
  size_t next = 0;
  for (const ProvidedRows& p : ws.providers) {
    if (p.provider == nullptr || p.begin != next || p.end <= p.begin)
      throw Error("forward: the providers' row ranges must cover the rows in order");
    next = p.end;
  }
  if (next != M)
    throw Error("forward: the providers cover " + std::to_string(next) + " of " +
                std::to_string(M) + " rows");
  if (ws.providers.size() > 1 && ws.stats != nullptr)
    throw Error("forward: a pass over several providers gathers no statistics");
}

}  // namespace vc
