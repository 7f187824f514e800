// A pass's rows kept on the model's device from the embedding to the logits: what
// forward() uses, instead of a copy up and back around every matrix product, when
// the model's LinearBackend offers it (LinearBackend::rows()). The activations (the
// residual stream, the normed rows, queries, keys, values, attention outputs, the
// MLP's rows) live in the device's buffers below; the host sees only what it must:
// each layer's new K and V (written into the KV tiers, which stay in host memory),
// the queries of rows the CPU attends for (draft rows over a view the device does
// not read, prefill statistics) and the logits.
//
// Every pass of such a model runs this way, prompt, decode, draft and verify alike,
// so full decoding and verification compute with the same operations (the exactness
// contract); the device's norms, RoPE and SwiGLU need not give the CPU's bits.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>

#include "runtime/model/weight.hpp"

namespace vc {

class DeviceRows {
 public:
  /// The pass's buffers, [rows, width] f32 each; gq / gout hold rows gathered for
  /// attention, logits the LM head's output.
  enum Buf : int { x, h, q, k, v, attn, gate, up, gq, gout, logits, kBufs };
  virtual ~DeviceRows() = default;
  /// Makes buffer `b` hold at least `n` floats (contents not kept).
  virtual void reserve(Buf b, size_t n) = 0;
  /// The buffer's address where the model's AttentionBackend reads queries and
  /// writes outputs (device memory on a GPU).
  [[nodiscard]] virtual float* at(Buf b) = 0;
  /// x[m] = the embedding table's row tokens[m] - row0 as f32, zeros for a token
  /// outside [row0, row0 + table.rows) (ids already validated).
  virtual void embed(std::span<const int32_t> tokens, const Weight& table, size_t row0) = 0;
  /// out[r] = rms_norm(in[r]) * w for `rows` rows of `dim` (in place when in == out).
  virtual void rms_norm(Buf in, size_t rows, size_t dim, const Weight& w, float eps, Buf out) = 0;
  /// out[M, w.rows] = in[M, w.cols] · w^T (+ bias): the LinearBackend's product,
  /// its prompt product (linear_prompt's bits) when `prompt`.
  virtual void linear(Buf in, size_t M, const Weight& w, const Weight& bias, Buf out, bool prompt) = 0;
  /// RoPE in place on b[M, heads, head_dim] at `positions` (host, M).
  virtual void rope(Buf b, size_t M, size_t heads, size_t head_dim, std::span<const int32_t> positions,
                    std::span<const float> inv_freq) = 0;
  /// gate[i] = silu(gate[i]) * up[i] for i < n.
  virtual void swiglu(size_t n) = 0;
  /// into[i] += from[i] for i < n.
  virtual void add(Buf into, Buf from, size_t n) = 0;
  /// to[i] = from[rows[i]] (rows of `width` floats).
  virtual void gather(Buf from, std::span<const size_t> rows, size_t width, Buf to) = 0;
  /// to[rows[i]] = from[i].
  virtual void scatter(Buf from, std::span<const size_t> rows, size_t width, Buf to) = 0;
  /// host[0, n) = b[offset, offset + n), once everything queued before has run.
  virtual void download(Buf b, size_t offset, size_t n, float* host) = 0;
  /// b[offset, offset + n) = host[0, n), before anything queued after.
  virtual void upload(const float* host, size_t n, Buf b, size_t offset) = 0;
  /// Returns once everything queued has run: before the buffers are handed to the
  /// AttentionBackend, which works on its own stream.
  virtual void sync() = 0;
};

}  // namespace vc
