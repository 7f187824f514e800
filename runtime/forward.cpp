// Llama-family decoder layer: RMSNorm -> QKV (+bias) -> (q/k norm) -> RoPE -> store
// KV -> paged attention -> O -> residual -> RMSNorm -> SwiGLU MLP -> residual.
#include "runtime/forward.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <thread>

#include "kernels/cpu/attention.hpp"
#include "runtime/prefill_stats.hpp"
#include "runtime/tp_comm.hpp"
#include "kernels/cpu/elementwise.hpp"
#include "kernels/cpu/matmul.hpp"
#include "kernels/error.hpp"
#include "runtime/attention_backend.hpp"
#include "runtime/linear_backend.hpp"
#include "runtime/view_rows_plan.hpp"
#include "kvtiers/view_attention.hpp"

namespace vc {

int default_thread_count() {
  const unsigned hw = std::thread::hardware_concurrency();
  return int(std::clamp(hw == 0 ? 1u : hw, 1u, 2u));
}

Workspace::Workspace(int threads)
    : pool_(std::make_unique<cpu::ThreadPool>(threads > 0 ? threads : default_thread_count())) {}

namespace {

// Below this many multiply-adds a matmul runs on the calling thread: waking a second
// core costs more than it saves on the small matrices of a decode step.
constexpr size_t kParallelMinMacs = size_t(1) << 17;

void linear(const Model& model, Workspace& ws, const float* x, size_t M, const Weight& w,
            const Weight& bias, float* y) {
  if (LinearBackend* b = model.linear_backend())
    return ws.prompt_rows ? b->linear_prompt(x, M, w, bias, y) : b->linear(x, M, w, bias, y);
  const float* bias_f = nullptr;
  if (bias.present()) {  // converted into the workspace: no allocation per call
    ws.bias.resize(bias.cols);
    to_f32(bias.dtype, bias.data, ws.bias.data(), bias.cols);
    bias_f = ws.bias.data();
  }
  cpu::ThreadPool* pool = M * w.rows * w.cols >= kParallelMinMacs ? &ws.pool() : nullptr;
  cpu::matmul(x, M, w.cols, w.data, w.dtype, w.rows, bias_f, y, pool);
}

void linear(const Model& model, Workspace& ws, const float* x, size_t M, const Weight& w, float* y) {
  linear(model, ws, x, M, w, Weight{}, y);
}

void check_rows(std::span<const ForwardRow> rows, const PagedKvCache& cache) {
  for (size_t i = 0; i < rows.size(); ++i) {
    const ForwardRow& r = rows[i];
    if (r.seq == nullptr) throw Error("forward: row " + std::to_string(i) + " has no sequence");
    const size_t cap = r.seq->blocks.size() * cache.config().block_tokens;
    if (r.position < 0 || size_t(r.position) >= cap)
      throw Error("forward: position " + std::to_string(r.position) +
                  " is outside the reserved KV of its sequence");
    if (size_t(r.position) > r.seq->length) {
      // Earlier rows of the same sequence in this pass fill the gap.
      bool filled = i > 0 && rows[i - 1].seq == r.seq && rows[i - 1].position + 1 == r.position;
      if (!filled) throw Error("forward: position " + std::to_string(r.position) +
                               " skips positions its sequence does not hold");
    }
  }
}


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
// the pool. Per row the blocks still come in position order, so each row's bits are
// those of one pass over the whole range (AttentionRowState).
void attend_tiles(const cpu::PagedKv& kv, size_t r0, size_t M, size_t b_begin, size_t b_end,
                  Workspace& ws) {
  const size_t tile = tile_blocks(kv);
  for (size_t b0 = b_begin; b0 < b_end; b0 += tile) {
    const size_t b1 = std::min(b_end, b0 + tile);
    ws.pool().parallel_for(M, 1, [&](size_t b, size_t e) {
      for (size_t m = b; m < e; ++m) ws.attn_states[r0 + m].add(kv, b0, b1);
    });
  }
}

// One KV head of a compressed view whose rows are packed, for the drafter's kernel.
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
// attend(q, out) run over it, its outputs scattered back to the rows' places.
template <class Attend>
void attend_gathered(std::span<const size_t> idx, size_t qd, Workspace& ws, Attend&& attend) {
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
                             size_t l, std::span<const ForwardRow> rows, float scale, Workspace& ws) {
  const size_t qd = size_t(c.num_heads) * size_t(c.head_dim);
  std::vector<size_t>& idx = ws.device_rows;
  std::vector<int32_t>& n_ctx = ws.device_ctx;
  std::vector<const KvSequence*>& seqs = ws.device_seqs;
  idx.clear(), n_ctx.clear(), seqs.clear();
  for (size_t m = 0; m < rows.size(); ++m)
    if (rows[m].view == nullptr)
      idx.push_back(m), n_ctx.push_back(ws.positions[m] + 1), seqs.push_back(rows[m].seq);
  if (idx.empty()) return;
  attend_gathered(idx, qd, ws, [&](const float* q, float* out) {
    be.attend_cached(cache, l, size_t(c.num_heads), seqs, n_ctx, scale, q, out);
  });
}

// The draft rows of a pass (those over a view) on the model's device, when their
// views are in a form it reads (plan_view_rows): true when the device took them all (or
// there are none), false when they stay on the CPU.
bool attend_views_on_device(AttentionBackend& be, const ModelConfig& c, const PagedKvCache& cache,
                            size_t l, std::span<const ForwardRow> rows, float scale, Workspace& ws) {
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
  attend_gathered(idx, qd, ws, [&](const float* q, float* out) {
    be.attend_views(cache, l, size_t(c.num_heads), *plan, n_ctx, scale, q, out);
  });
  return true;
}

// Attention of every row over the cache (and the compressed views of draft rows):
// runs of rows of one sequence without views go tile by tile (attend_run_tiled);
// the other rows are independent, split across the pool. With `device`, the rows
// without views attend there instead (attend_cached_on_device), and the draft rows
// too when their views are in a form it reads (attend_views_on_device), unless statistics
// want each row's softmax maximum and sum, which the device does not return: the
// CPU then attends too, for them, and the device's outputs replace the CPU's.
void attend_cached(const ModelConfig& c, const PagedKvCache& cache, size_t l,
                   std::span<const ForwardRow> rows, float scale, Workspace& ws,
                   float* max_sum, AttentionBackend* device) {
  const size_t M = rows.size();
  const size_t nh = size_t(c.num_heads), hd = size_t(c.head_dim);
  const size_t qd = nh * hd;
  const std::vector<int32_t>& pos = ws.positions;
  const bool cpu_full = device == nullptr || max_sum != nullptr;
  const bool views_on_device =
      !cpu_full && attend_views_on_device(*device, c, cache, l, rows, scale, ws);
  thread_local std::vector<size_t> alone_rows;  // rows attended one by one
  std::vector<size_t>& alone = alone_rows;  // the pool's threads read the caller's
  alone.clear();
  for (size_t m = 0; m < M;) {
    size_t e = m + 1;
    if (rows[m].view == nullptr)
      while (e < M && rows[e].view == nullptr && rows[e].seq == rows[m].seq) ++e;
    if (rows[m].view == nullptr ? !cpu_full : views_on_device) {
      // on the device (the full-KV rows below, the draft rows above)
    } else if (e - m >= 2) {
      attend_run_tiled(c, cache, l, rows, m, e, scale, ws, max_sum);
    } else {
      alone.push_back(m);
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
  if (device != nullptr) attend_cached_on_device(*device, c, cache, l, rows, scale, ws);
}

// Attention of rows [r0, r0 + rows.size()) of the pass over KV streamed in by
// `provider`, chunk by chunk in position order, each chunk in tiles of blocks: each
// row's state merges the blocks as attention_row would merge them, so the bits equal
// a pass over a cache holding the same KV. With `device`, each chunk is staged there
// before it is released and the rows attend there once the last has come: the bits
// of the device over a cache holding the same KV (attend_cached_on_device). The CPU
// then attends only when statistics want the rows' softmax maxima and sums.
void attend_streamed(const ModelConfig& c, LayerKvProvider& provider, size_t l,
                     std::span<const ForwardRow> rows, size_t r0, float scale, Workspace& ws,
                     AttentionBackend* device) {
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
  if (pass) pass->run(ws.q.data() + r0 * qd, ws.attn.data() + r0 * qd);
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

}  // namespace

void forward(const Model& model, std::span<const ForwardRow> rows, PagedKvCache& cache,
             Workspace& ws, std::vector<float>& logits) {
  const ModelConfig& c = model.config();
  const ModelWeights& W = model.weights();
  const size_t M = rows.size();
  const size_t D = size_t(c.hidden_size), hd = size_t(c.head_dim);
  const size_t nh = size_t(c.num_heads), nkv = size_t(c.num_kv_heads);
  const size_t qd = nh * hd, kvd = nkv * hd, I = size_t(c.intermediate_size);
  const bool provided = !ws.providers.empty();
  if (provided) check_providers(ws, M);
  else check_rows(rows, cache);

  ws.x.resize(M * D);
  ws.h.resize(M * D);
  ws.q.resize(M * qd);
  ws.k.resize(M * kvd);
  ws.v.resize(M * kvd);
  ws.attn.resize(M * qd);
  ws.gate.resize(M * I);
  ws.up.resize(M * I);
  std::vector<int32_t>& pos = ws.positions;
  pos.resize(M);
  const TensorParallelRank* tp = model.tp();
  // Tensor parallelism: this rank's vocabulary rows of the embedding; the others
  // come from the other ranks (a sum with zeros).
  const size_t v0 = tp != nullptr ? tp->vocab_begin : 0;
  for (size_t m = 0; m < M; ++m) {
    const int32_t t = rows[m].token;
    if (t < 0 || t >= c.vocab_size)
      throw Error("forward: token id " + std::to_string(t) + " is outside the vocabulary (" +
                  std::to_string(c.vocab_size) + ")");
    pos[m] = rows[m].position;
    if (size_t(t) < v0 || size_t(t) - v0 >= W.embed.rows) {
      std::fill_n(ws.x.data() + m * D, D, 0.0f);
      continue;
    }
    to_f32(W.embed.dtype,
           static_cast<const std::byte*>(W.embed.data) + (size_t(t) - v0) * D * dtype_size(W.embed.dtype),
           ws.x.data() + m * D, D);
  }
  // Sums the ranks' partials of [M, D] (nothing without tensor parallelism).
  auto reduce = [&](float* data) {
    if (tp != nullptr) tp->comm->all_reduce_sum(tp->rank, data, M * D);
  };
  reduce(ws.x.data());

  const float scale = float(1.0 / std::sqrt(double(hd)));
  for (size_t l = 0; l < W.layers.size(); ++l) {
    const LayerWeights& L = W.layers[l];
    cpu::rms_norm(ws.x.data(), M, D, L.attn_norm.data, L.attn_norm.dtype, c.rms_norm_eps,
                  ws.h.data());
    if (ws.stats != nullptr && ws.stats->needs_hidden())
      ws.stats->observe_hidden(l, rows, ws.h.data(), D);
    linear(model, ws, ws.h.data(), M, L.wq, L.bq, ws.q.data());
    linear(model, ws, ws.h.data(), M, L.wk, L.bk, ws.k.data());
    linear(model, ws, ws.h.data(), M, L.wv, L.bv, ws.v.data());
    if (c.qk_norm) {
      cpu::rms_norm(ws.q.data(), M * nh, hd, L.q_norm.data, L.q_norm.dtype, c.rms_norm_eps,
                    ws.q.data());
      cpu::rms_norm(ws.k.data(), M * nkv, hd, L.k_norm.data, L.k_norm.dtype, c.rms_norm_eps,
                    ws.k.data());
    }
    cpu::rope(ws.q.data(), M, nh, hd, pos.data(), model.rope_inv_freq().data());
    cpu::rope(ws.k.data(), M, nkv, hd, pos.data(), model.rope_inv_freq().data());
    if (provided) {
      if (ws.attn_states.size() < M) ws.attn_states.resize(M);
      for (const ProvidedRows& p : ws.providers) {
        for (size_t m = p.begin; m < p.end; ++m)
          p.provider->write(l, size_t(pos[m]), ws.k.data() + m * kvd, ws.v.data() + m * kvd);
        attend_streamed(c, *p.provider, l, rows.subspan(p.begin, p.end - p.begin), p.begin,
                        scale, ws, model.attention_backend());
      }
    } else {
      for (size_t m = 0; m < M; ++m)
        cache.write(l, *rows[m].seq, size_t(pos[m]), ws.k.data() + m * kvd,
                    ws.v.data() + m * kvd);
      const bool stats_keys = ws.stats != nullptr && ws.stats->needs_keys();
      if (stats_keys) ws.attn_max_sum.resize(M * nh * 2);
      attend_cached(c, cache, l, rows, scale, ws, stats_keys ? ws.attn_max_sum.data() : nullptr,
                    model.attention_backend());
      if (ws.stats != nullptr) {
        const cpu::PagedKv kv = cache.view(l, *rows[0].seq);
        ws.stats->observe(l, rows, ws.q.data(), stats_keys ? &kv : nullptr,
                          stats_keys ? ws.attn_max_sum.data() : nullptr);
      }
    }

    linear(model, ws, ws.attn.data(), M, L.wo, ws.h.data());
    reduce(ws.h.data());
    cpu::add_inplace(ws.x.data(), ws.h.data(), M * D);

    cpu::rms_norm(ws.x.data(), M, D, L.mlp_norm.data, L.mlp_norm.dtype, c.rms_norm_eps,
                  ws.h.data());
    linear(model, ws, ws.h.data(), M, L.w_gate, ws.gate.data());
    linear(model, ws, ws.h.data(), M, L.w_up, ws.up.data());
    cpu::swiglu(ws.gate.data(), ws.up.data(), ws.gate.data(), M * I);
    linear(model, ws, ws.gate.data(), M, L.w_down, ws.h.data());
    reduce(ws.h.data());
    cpu::add_inplace(ws.x.data(), ws.h.data(), M * D);
  }

  // Final norm and LM head, only for the rows that want logits.
  size_t n_out = 0;
  for (size_t m = 0; m < M; ++m)
    if (rows[m].want_logits)
      std::copy_n(ws.x.data() + m * D, D, ws.h.data() + (n_out++) * D);
  logits.resize(n_out * size_t(c.vocab_size));
  if (n_out == 0) return;
  cpu::rms_norm(ws.h.data(), n_out, D, W.final_norm.data, W.final_norm.dtype, c.rms_norm_eps,
                ws.h.data());
  // The LM head takes the step product for every row, a prompt's too: a prefill has
  // one row that wants logits, which a prompt product would pad to a whole tile.
  const PromptRows step_rows(ws, false);
  if (tp == nullptr) {
    linear(model, ws, ws.h.data(), n_out, W.lm_head, logits.data());
    return;
  }
  // Each rank's vocabulary slice ([n_out, slice], padded to the common size), gathered.
  const size_t slice = tp->vocab_slice, d = size_t(tp->degree), V = size_t(c.vocab_size);
  ws.gate.assign(n_out * slice, 0.0f);
  if (W.lm_head.rows > 0) {
    ws.up.resize(n_out * W.lm_head.rows);
    linear(model, ws, ws.h.data(), n_out, W.lm_head, ws.up.data());
    for (size_t m = 0; m < n_out; ++m)
      std::copy_n(ws.up.data() + m * W.lm_head.rows, W.lm_head.rows, ws.gate.data() + m * slice);
  }
  ws.attn.resize(d * n_out * slice);
  tp->comm->all_gather(tp->rank, ws.gate.data(), n_out * slice, ws.attn.data());
  for (size_t r = 0; r < d; ++r) {
    const size_t b = std::min(V, r * slice), n = std::min(V, b + slice) - b;
    for (size_t m = 0; m < n_out; ++m)
      std::copy_n(ws.attn.data() + (r * n_out + m) * slice, n, logits.data() + m * V + b);
  }
}


std::vector<float> prefill(const Model& model, std::span<const int32_t> ids, KvSequence& seq,
                           PagedKvCache& cache, Workspace& ws, size_t chunk) {
  if (ids.empty()) throw Error("prefill: the prompt has no tokens");
  if (chunk == 0) chunk = ids.size();
  const bool fresh = seq.length == 0 && seq.blocks.empty();
  // A fresh sequence reuses the blocks of a live sequence with the same leading
  // tokens; the last position is always computed (its logits are the result), and
  // the positions whose queries the statistics need stay computed too: the window,
  // or every position when the statistics sum over all queries (so the plan never
  // depends on what else runs).
  size_t shared = 0;
  if (fresh) {
    size_t limit = ids.size() - 1;
    if (ws.stats != nullptr)
      limit = ws.stats->needs_every_query()
                  ? 0
                  : std::min(limit, ids.size() > ws.stats->window() ? ids.size() - ws.stats->window() : 0);
    shared = cache.share_prefix(seq, ids, limit);
  }
  const size_t start = seq.length;
  const std::span<const int32_t> rest = ids.subspan(shared);
  cache.reserve(seq, start + rest.size());
  std::vector<ForwardRow> rows;
  std::vector<float> logits;
  const PromptRows prompt_rows(ws);
  for (size_t b = 0; b < rest.size(); b += chunk) {
    const size_t e = std::min(rest.size(), b + chunk);
    rows.clear();
    for (size_t i = b; i < e; ++i)
      rows.push_back(ForwardRow{rest[i], int32_t(start + i), &seq, i + 1 == rest.size()});
    forward(model, rows, cache, ws, logits);
  }
  if (fresh) cache.publish_prefix(seq, ids);
  return logits;
}

}  // namespace vc
