// Where a forward pass multiplies by its weight matrices when not on the CPU: a
// model placed on a device (Model::on_device) carries one, and forward() hands it
// every matrix product (q/k/v/o, gate/up/down, the LM head) over host rows, or, when
// the backend offers rows() (the CUDA one does), the whole pass with its rows kept on
// the device (runtime/device_rows.hpp). Attention goes to the AttentionBackend; the KV
// cache, the compressed views, the full tier and sampling stay on the host, the same
// objects whatever the device.
#pragma once
#include <cstddef>
#include <memory>
#include <span>
#include <string>

#include "runtime/device_rows.hpp"
#include "runtime/model/weight.hpp"

namespace vc {

class LinearBackend {
 public:
  virtual ~LinearBackend() = default;
  /// The device in words ("cuda:0 (NVIDIA H100 80GB HBM3)").
  [[nodiscard]] virtual const std::string& description() const = 0;
  /// y[M, w.rows] = x[M, w.cols] · w^T (+ bias, [w.rows], when present); host
  /// pointers. Batch invariant: row m of y depends on row m of x alone, bit for bit,
  /// whatever M. Safe to call from several threads at once. Throws vc::Error for a
  /// weight the backend does not hold or a device failure.
  virtual void linear(const float* x, size_t M, const Weight& w, const Weight& bias, float* y) = 0;
  /// The same product for a prompt's rows (prefill chunks; Workspace::prompt_rows),
  /// where a backend may use another kernel (the CUDA one: a GEMM library). Row m
  /// still depends on row m of x alone, bit for bit, whatever M and wherever the row
  /// sits in x, but its bits may differ from linear()'s: every prompt row takes this
  /// product in every mode and flow (full decoding, vericache, a shared or fetched
  /// prefix), and decode, draft and verify rows never do, so both modes read the
  /// same prompt KV. The LM head always takes linear(). Defaults to linear().
  virtual void linear_prompt(const float* x, size_t M, const Weight& w, const Weight& bias, float* y) {
    linear(x, M, w, bias, y);
  }
  /// What decides the bits of its products, in words, for keys of KV computed with
  /// them (remote prefix chunks): the device kind and everything that picks the
  /// kernels, not which device of the kind. Defaults to description().
  [[nodiscard]] virtual std::string numerics() const { return description(); }
  /// Bytes of device memory held now (the matrices, the callers' buffers).
  [[nodiscard]] virtual size_t device_bytes() const { return 0; }
  /// A pass's rows on the device (runtime/device_rows.hpp), for the calling thread
  /// until the handle is dropped; null (the default) when the backend only offers
  /// products over host rows. A backend either always offers them or never: every
  /// pass of its model then runs the same way.
  [[nodiscard]] virtual std::unique_ptr<DeviceRows> rows() { return nullptr; }
};

/// `matrices` copied to CUDA device `index` (bf16, f16 or f32, as held), and
/// `biases` converted to f32 there; linear() then takes any of them (by data
/// pointer; absent ones and repeats are skipped). With `vectors` (norm weights, as
/// held) and the embedding table among `matrices`, rows() keeps whole passes on the
/// device. Throws vc::Error naming the device
/// when this build has no CUDA, the device does not exist or cannot be used (the
/// CUDA error), or the matrices do not fit in its memory.
[[nodiscard]] std::shared_ptr<LinearBackend> make_cuda_linear(std::span<const Weight> matrices,
                                                              std::span<const Weight> biases,
                                                              std::span<const Weight> vectors,
                                                              int index);
/// The same without vectors: products over host rows only (rows() gives null).
[[nodiscard]] std::shared_ptr<LinearBackend> make_cuda_linear(std::span<const Weight> matrices,
                                                              std::span<const Weight> biases,
                                                              int index);

}  // namespace vc
