// forward() with the rows on the model's device (runtime/device_rows.hpp): the
// layer of runtime/forward.cpp step for step, each step one operation of the
// device's, the activations never leaving it. Per layer the host receives the new
// K and V (the KV tiers are in host memory) and, only where the CPU attends for a
// row or prefill statistics read them, the queries or normed rows; at the end the
// logits of the rows that want them.
#include <algorithm>
#include <vector>

#include "runtime/device_rows.hpp"
#include "runtime/forward_attention.hpp"
#include "runtime/prefill_stats.hpp"

namespace vc {

void forward_on_device(const Model& model, DeviceRows& dev, std::span<const ForwardRow> rows,
                       PagedKvCache& cache, Workspace& ws, std::vector<float>& logits) {
  using B = DeviceRows;
  const ModelConfig& c = model.config();
  const ModelWeights& W = model.weights();
  const size_t M = rows.size();
  const size_t D = size_t(c.hidden_size), hd = size_t(c.head_dim);
  const size_t nh = size_t(c.num_heads), nkv = size_t(c.num_kv_heads);
  const size_t qd = nh * hd, kvd = nkv * hd, I = size_t(c.intermediate_size);
  const float eps = c.rms_norm_eps;
  const bool prompt = ws.prompt_rows;
  for (const auto& [b, n] : {std::pair{B::x, M * D}, {B::h, M * D}, {B::q, M * qd}, {B::k, M * kvd},
                             {B::v, M * kvd}, {B::attn, M * qd}, {B::gate, M * I}, {B::up, M * I},
                             {B::gq, M * qd}, {B::gout, M * qd}})
    dev.reserve(b, n);
  // Host copies: K and V for the tiers, queries and outputs where the CPU attends.
  ws.k.resize(M * kvd);
  ws.v.resize(M * kvd);
  ws.q.resize(M * qd);
  ws.attn.resize(M * qd);
  std::vector<int32_t>& tokens = ws.device_ctx;  // free until the layers' attention
  tokens.resize(M);
  for (size_t m = 0; m < M; ++m) tokens[m] = rows[m].token;
  dev.embed(tokens, W.embed, 0);

  for (size_t l = 0; l < W.layers.size(); ++l) {
    const LayerWeights& L = W.layers[l];
    dev.rms_norm(B::x, M, D, L.attn_norm, eps, B::h);
    if (ws.stats != nullptr && ws.stats->needs_hidden()) {
      ws.h.resize(M * D);
      dev.download(B::h, 0, M * D, ws.h.data());
      ws.stats->observe_hidden(l, rows, ws.h.data(), D);
    }
    dev.linear(B::h, M, L.wq, L.bq, B::q, prompt);
    dev.linear(B::h, M, L.wk, L.bk, B::k, prompt);
    dev.linear(B::h, M, L.wv, L.bv, B::v, prompt);
    if (c.qk_norm) {
      dev.rms_norm(B::q, M * nh, hd, L.q_norm, eps, B::q);
      dev.rms_norm(B::k, M * nkv, hd, L.k_norm, eps, B::k);
    }
    dev.rope(B::q, M, nh, hd, ws.positions, model.rope_inv_freq());
    dev.rope(B::k, M, nkv, hd, ws.positions, model.rope_inv_freq());
    dev.download(B::k, 0, M * kvd, ws.k.data());
    dev.download(B::v, 0, M * kvd, ws.v.data());
    RowsIo io;
    io.rows = &dev, io.M = M, io.qd = qd;
    attend_layer(model, rows, cache, l, ws, io);

    dev.linear(B::attn, M, L.wo, Weight{}, B::h, prompt);
    dev.add(B::x, B::h, M * D);
    dev.rms_norm(B::x, M, D, L.mlp_norm, eps, B::h);
    dev.linear(B::h, M, L.w_gate, Weight{}, B::gate, prompt);
    dev.linear(B::h, M, L.w_up, Weight{}, B::up, prompt);
    dev.swiglu(M * I);
    dev.linear(B::gate, M, L.w_down, Weight{}, B::h, prompt);
    dev.add(B::x, B::h, M * D);
  }

  // Final norm and LM head (the step product, as on the host) for the rows that want
  // logits, gathered.
  std::vector<size_t>& out_rows = ws.device_rows;  // free once the layers are done
  out_rows.clear();
  for (size_t m = 0; m < M; ++m)
    if (rows[m].want_logits) out_rows.push_back(m);
  const size_t n_out = out_rows.size(), V = size_t(c.vocab_size);
  logits.resize(n_out * V);
  if (n_out == 0) return dev.sync();  // a failure of the pass is this pass's
  dev.gather(B::x, out_rows, D, B::h);
  dev.rms_norm(B::h, n_out, D, W.final_norm, eps, B::h);
  dev.reserve(B::logits, n_out * V);
  dev.linear(B::h, n_out, W.lm_head, Weight{}, B::logits, false);
  dev.download(B::logits, 0, n_out * V, logits.data());
}

}  // namespace vc
