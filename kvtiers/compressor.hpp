// The compressor interface (DESIGN.md): a compressor sees one request's full KV
// (and, where its method needs them, statistics gathered during prefill) and
// returns only which token positions to keep, per layer and KV head, and the bits
// per element of what is kept. The compressed tier applies the plan.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kernels/dtype.hpp"
#include "kvtiers/packed_kv.hpp"

namespace vc {

/// A request's full KV as dense fp32, K after RoPE (as cached).
/// k, v: [layers][kv_heads][n_pos][head_dim].
struct KvSnapshot {
  size_t layers = 0, kv_heads = 0, head_dim = 0, n_pos = 0;
  std::vector<float> k, v;

  [[nodiscard]] size_t index(size_t l, size_t h, size_t p) const {
    return ((l * kv_heads + h) * n_pos + p) * head_dim;
  }
  [[nodiscard]] const float* k_at(size_t l, size_t h, size_t p) const { return &k[index(l, h, p)]; }
  [[nodiscard]] const float* v_at(size_t l, size_t h, size_t p) const { return &v[index(l, h, p)]; }
};

/// Statistics of the prompt, gathered by the prefill pass (runtime/prefill_stats).
struct PrefillStats {
  size_t layers = 0, heads = 0, kv_heads = 0, head_dim = 0, n_pos = 0;
  /// The last `window` prompt positions' attention weights to every position,
  /// summed over the query heads of each KV head:
  /// [layers][kv_heads][window][n_pos] (row w is query position n_pos - window + w;
  /// entries past the query position are 0).
  size_t window = 0;
  std::vector<float> window_attention;
  /// Attention weight received by each position, accumulated over every prompt
  /// query and the query heads of each KV head (H2O): [layers][kv_heads][n_pos].
  std::vector<float> accumulated_attention;
  /// Per query head, the mean and the mean square of each channel of the post-RoPE
  /// queries over the prompt: [layers][heads][head_dim] each (ExpectedAttention).
  std::vector<float> query_mean, query_sq_mean;

  [[nodiscard]] const float* window_row(size_t l, size_t g, size_t w) const {
    return &window_attention[((l * kv_heads + g) * window + w) * n_pos];
  }
  [[nodiscard]] const float* accumulated(size_t l, size_t g) const {
    return &accumulated_attention[(l * kv_heads + g) * n_pos];
  }
};

/// Model facts some methods need (kept out of the runtime layer: raw pointers).
struct ModelFacts {
  size_t heads = 0;                      // query heads (GQA groups = heads / kv_heads)
  std::vector<float> rope_inv_freq;      // [head_dim / 2] (to undo RoPE: KVQuant)
  std::vector<int32_t> positions;        // absolute position of snapshot index p
  /// Output projection of each layer, [hidden, heads * head_dim] row-major (LaProx).
  struct Matrix {
    const void* data = nullptr;
    DType dtype = DType::bf16;
    size_t rows = 0, cols = 0;
  };
  std::vector<Matrix> wo;
};

struct CompressorInput {
  const KvSnapshot& kv;
  const PrefillStats* stats = nullptr;  // null when not gathered
  const ModelFacts& model;
  double ratio = 4.0;  // target: full KV bytes / compressed KV bytes (bf16 full KV)
};

/// How kept values are stored. bits == 16 means unquantized (bf16).
struct QuantSpec {
  int key_bits = 16;
  int value_bits = 16;
  [[nodiscard]] bool quantized() const { return key_bits < 16 || value_bits < 16; }
};

/// The compressor's answer. keep[l][g] lists the kept positions (snapshot indices,
/// ascending) of layer l, KV head g; every other position is dropped.
struct CompressionPlan {
  std::vector<std::vector<std::vector<int32_t>>> keep;
  QuantSpec quant;
};

/// A method's parameter: name, value, meaning (for `vericache compressors`).
struct CompressorParam {
  std::string name;
  double value = 0;
  std::string help;
};

/// One compression method. plan() is a pure function of its input and parameters.
/// Quantizing methods also implement quantize(), which the compressed tier calls on
/// the kept rows of each (layer, KV head) to get what it stores.
class Compressor {
 public:
  virtual ~Compressor() = default;
  [[nodiscard]] virtual std::string_view name() const = 0;
  /// One line: what the method does, and its paper.
  [[nodiscard]] virtual std::string_view summary() const = 0;
  /// Current parameters (after set_param and the ratio mapping).
  [[nodiscard]] virtual std::vector<CompressorParam> params() const = 0;
  /// Sets a method parameter; throws vc::Error naming an unknown one or a bad value.
  virtual void set_param(const std::string& name, double value) = 0;
  /// True when plan() needs PrefillStats.
  [[nodiscard]] virtual bool needs_stats() const { return false; }

  [[nodiscard]] virtual CompressionPlan plan(const CompressorInput& in) const = 0;

  /// Replaces k, v ([n, head_dim] each, rows at absolute `positions`) of layer l, KV
  /// head g by what the method stores, dequantized; returns the stored bytes
  /// (codes + scales + any full-precision rows). The default stores bf16. When
  /// `packed` is given, a codec that can describes there what it stores (and sets
  /// packed->described), such that PackedSide::decode gives back exactly the values
  /// written to k and v; the compressed tier holds that.
  virtual size_t quantize(size_t l, size_t g, const int32_t* positions, size_t n,
                          size_t head_dim, const ModelFacts& model, float* k, float* v,
                          PackedHead* packed = nullptr) const;
};

/// Every registered method, by name: streaming_llm, snapkv, h2o, expected_attention,
/// kvzip, laprox, kivi, kvquant, rotate_kv; and "DROP+QUANT" compositions
/// (e.g. "snapkv+kivi"). Throws vc::Error listing the names when unknown.
[[nodiscard]] std::unique_ptr<Compressor> make_compressor(const std::string& name);
/// A compressor's own parameters, as set by a user (name, value), in order.
using CompressorSettings = std::vector<std::pair<std::string, double>>;
/// make_compressor, then set_param for each setting (errors name the method and
/// the parameter).
[[nodiscard]] std::unique_ptr<Compressor> make_compressor(const std::string& name,
                                                          const CompressorSettings& settings);
/// Parses "name=value" (CLI and batch files); vc::Error naming the text otherwise.
[[nodiscard]] std::pair<std::string, double> parse_compressor_setting(const std::string& text);
[[nodiscard]] std::vector<std::string> compressor_names();

/// Keeps the `budget` highest-scoring positions of `scores` plus every position in
/// `always` (sinks, recent window), ties by lower position; ascending result.
[[nodiscard]] std::vector<int32_t> keep_top(const std::vector<float>& scores, size_t budget,
                                            const std::vector<int32_t>& always = {});

/// Keeps `forced` (in priority order, at most `budget` of them), then the best
/// `scores` among the other positions up to `budget` in all (NaN ranks lowest);
/// ascending.
[[nodiscard]] std::vector<int32_t> select_positions(const std::vector<float>& scores,
                                                    size_t budget,
                                                    const std::vector<int32_t>& forced);

/// Positions a token-dropping method keeps per head for `ratio` (bf16 storage).
[[nodiscard]] size_t kept_per_head(size_t n_pos, double ratio);

}  // namespace vc
