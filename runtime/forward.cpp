// Llama-family decoder layer: RMSNorm -> QKV (+bias) -> (q/k norm) -> RoPE -> store
// KV -> paged attention -> O -> residual -> RMSNorm -> SwiGLU MLP -> residual.
#include "runtime/forward.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <thread>

#include "kernels/cpu/elementwise.hpp"
#include "kernels/cpu/matmul.hpp"
#include "kernels/error.hpp"
#include "runtime/device_rows.hpp"
#include "runtime/forward_attention.hpp"
#include "runtime/linear_backend.hpp"
#include "runtime/prefill_stats.hpp"
#include "runtime/tp_comm.hpp"

namespace vc {

int default_thread_count() {
  const unsigned hw = std::thread::hardware_concurrency();
  return int(std::clamp(hw == 0 ? 1u : hw, 1u, 2u));
}

Workspace::Workspace(int threads)
    : pool_(std::make_unique<cpu::ThreadPool>(threads > 0 ? threads : default_thread_count())) {}

void between_prefill_chunks(Workspace& ws) {
  if (!ws.chunk_hook) return;
  struct SetAside {
    Workspace& ws;
    PrefillStatsCollector* stats = ws.stats;
    bool prompt_rows = ws.prompt_rows;
    std::vector<ProvidedRows> providers = std::move(ws.providers);
    ~SetAside() {
      ws.stats = stats;
      ws.prompt_rows = prompt_rows;
      ws.providers = std::move(providers);
    }
  } aside{ws};
  ws.stats = nullptr;
  ws.prompt_rows = false;
  ws.providers.clear();
  ws.chunk_hook();
}

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


}  // namespace

void forward(const Model& model, std::span<const ForwardRow> rows, PagedKvCache& cache,
             Workspace& ws, std::vector<float>& logits) {
  const ModelConfig& c = model.config();
  const ModelWeights& W = model.weights();
  const size_t M = rows.size();
  const size_t D = size_t(c.hidden_size), hd = size_t(c.head_dim);
  const size_t nh = size_t(c.num_heads), nkv = size_t(c.num_kv_heads);
  const size_t qd = nh * hd, kvd = nkv * hd, I = size_t(c.intermediate_size);
  if (!ws.providers.empty()) check_providers(ws, M);
  else check_rows(rows, cache);
  std::vector<int32_t>& pos = ws.positions;
  pos.resize(M);
  for (size_t m = 0; m < M; ++m) {
    const int32_t t = rows[m].token;
    if (t < 0 || t >= c.vocab_size)
      throw Error("forward: token id " + std::to_string(t) + " is outside the vocabulary (" +
                  std::to_string(c.vocab_size) + ")");
    pos[m] = rows[m].position;
  }
  if (LinearBackend* b = model.linear_backend(); b != nullptr && model.tp() == nullptr)
    if (const std::unique_ptr<DeviceRows> dev = b->rows())
      return forward_on_device(model, *dev, rows, cache, ws, logits);

  ws.x.resize(M * D);
  ws.h.resize(M * D);
  ws.q.resize(M * qd);
  ws.k.resize(M * kvd);
  ws.v.resize(M * kvd);
  ws.attn.resize(M * qd);
  ws.gate.resize(M * I);
  ws.up.resize(M * I);
  const TensorParallelRank* tp = model.tp();
  // Tensor parallelism: this rank's vocabulary rows of the embedding; the others
  // come from the other ranks (a sum with zeros).
  const size_t v0 = tp != nullptr ? tp->vocab_begin : 0;
  for (size_t m = 0; m < M; ++m) {
    const int32_t t = rows[m].token;
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
    RowsIo host;
    attend_layer(model, rows, cache, l, ws, host);

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
    between_prefill_chunks(ws);
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
