// KVzap's surrogate (Jegou et al., arXiv 2601.07891; kvpress's KVzapModel): per
// layer, a small model of the layer's input hidden state x (after the attention
// RMSNorm) that predicts, per KV head, the log of a KVzip-style importance score of
// the token at that position. Two forms:
//   linear: s = W x + b                        W [kv_heads][dim], b [kv_heads]
//   mlp:    s = W2 gelu(W1 x + b1) + b2        W1 [units][dim], b1 [units],
//                                              W2 [kv_heads][units], b2 [kv_heads]
// (gelu: the exact erf form, as torch's nn.GELU). Scoring is a pure function of one
// row, so any number of rows per call gives the same bits.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "kvtiers/compressor.hpp"

namespace vc {

enum class KvzapForm { linear, mlp };

/// "linear" or "mlp".
[[nodiscard]] std::string_view kvzap_form_name(KvzapForm f);
/// Parses "linear" | "mlp"; vc::Error naming the text otherwise.
[[nodiscard]] KvzapForm parse_kvzap_form(const std::string& text);

/// One layer's surrogate. Linear: w1/b1 map dim -> kv_heads and w2/b2 are empty.
struct KvzapLayer {
  std::vector<float> w1, b1;  // [out1][dim], [out1]; out1 = kv_heads (linear) or units (mlp)
  std::vector<float> w2, b2;  // mlp only: [kv_heads][units], [kv_heads]
};

class KvzapSurrogate final : public HiddenScorer {
 public:
  KvzapForm form = KvzapForm::linear;
  size_t dim = 0;       // hidden size of the model
  size_t kv_heads = 0;  // scores per row
  size_t units = 0;     // hidden units of the mlp form (0 for linear)
  std::vector<KvzapLayer> layers;

  /// Throws vc::Error naming the layer and the tensor whose size does not match the
  /// form and the sizes above, or a non-finite value.
  void validate() const;

  [[nodiscard]] size_t outputs() const override { return kv_heads; }
  void score(size_t layer, const float* x, size_t rows, size_t dim, float* out) const override;
  /// One row: out [kv_heads].
  void score_row(size_t layer, const float* x, float* out) const;
};

}  // namespace vc
