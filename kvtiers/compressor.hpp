// The compressor interface (DESIGN.md): a compressor sees one request's full KV one
// layer at a time (and, where its method needs them, statistics gathered during
// prefill) and returns only which token positions to keep, per layer and KV head,
// and the bits per element of what is kept. The compressed tier applies the plan
// layer by layer (kvtiers/layer_compression.hpp drives the passes).
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kernels/dtype.hpp"
#include "kvtiers/head_shards.hpp"
#include "kvtiers/packed_kv.hpp"

namespace vc {

/// The shape of a request's KV: every layer has kv_heads heads of n_pos positions.
struct KvShape {
  size_t layers = 0, kv_heads = 0, head_dim = 0, n_pos = 0;
};

/// KV heads [first_head, first_head + kv_heads) of one layer as dense fp32, K after
/// RoPE (as cached): what a method plans from and the compressed tier builds from,
/// one slice of a layer at a time (a whole layer when first_head is 0 and kv_heads
/// the model's). Every method plans each KV head from that head's KV and statistics
/// alone, so the plan does not depend on how a layer is sliced.
struct LayerKv {
  size_t layer = 0;       // absolute layer index in the model
  size_t first_head = 0;  // absolute index of this slice's first KV head
  size_t kv_heads = 0, head_dim = 0, n_pos = 0;  // kv_heads: heads in this slice
  std::vector<float> k, v;  // [kv_heads][n_pos][head_dim] each

  /// Sets the shape and sizes k and v (values unspecified).
  void reshape(size_t l, size_t heads, size_t d, size_t n, size_t first = 0) {
    layer = l, first_head = first, kv_heads = heads, head_dim = d, n_pos = n;
    k.resize(heads * n * d);
    v.resize(k.size());
  }
  /// g: index within this slice (absolute head first_head + g).
  [[nodiscard]] size_t index(size_t g, size_t p) const { return (g * n_pos + p) * head_dim; }
  [[nodiscard]] const float* k_at(size_t g, size_t p) const { return &k[index(g, p)]; }
  [[nodiscard]] const float* v_at(size_t g, size_t p) const { return &v[index(g, p)]; }
};

/// A whole request's KV as dense fp32 (tests and small tools; the runtime reads one
/// layer at a time instead). k, v: [layers][kv_heads][n_pos][head_dim].
struct KvSnapshot {
  size_t layers = 0, kv_heads = 0, head_dim = 0, n_pos = 0;
  std::vector<float> k, v;

  [[nodiscard]] size_t index(size_t l, size_t h, size_t p) const {
    return ((l * kv_heads + h) * n_pos + p) * head_dim;
  }
  [[nodiscard]] const float* k_at(size_t l, size_t h, size_t p) const { return &k[index(l, h, p)]; }
  [[nodiscard]] const float* v_at(size_t l, size_t h, size_t p) const { return &v[index(l, h, p)]; }
  [[nodiscard]] KvShape shape() const { return {layers, kv_heads, head_dim, n_pos}; }
  /// Copies layer l into `out`.
  void read_layer(size_t l, LayerKv& out) const { read_heads(l, 0, kv_heads, out); }
  /// Copies KV heads [first, first + count) of layer l into `out`.
  void read_heads(size_t l, size_t first, size_t count, LayerKv& out) const;
};

class KvzapSurrogate;

/// A function of each layer's input hidden states (after the attention RMSNorm),
/// run by the prefill and verify passes on every row they compute: `outputs()`
/// values per row (KVzap's surrogate gives one score per KV head). Must depend on
/// the row alone (the same bits whatever rows share the call).
class HiddenScorer {
 public:
  virtual ~HiddenScorer() = default;
  [[nodiscard]] virtual size_t outputs() const = 0;
  /// x: [rows][dim] of layer `layer`; out: [rows][outputs()].
  virtual void score(size_t layer, const float* x, size_t rows, size_t dim, float* out) const = 0;
};

/// Which prefill statistics a method plans from. Each costs only when asked for:
/// the window is the last prompt queries (tiny), query moments accumulate in the
/// pass, and accumulated attention re-scores every prompt query against every key.
struct StatsNeeds {
  bool window = false;       // attention of the observation window (SnapKV, KVzip, LaProx)
  bool accumulated = false;  // attention received, summed over every prompt query (H2O, KVzip)
  bool query_moments = false;  // per-channel mean and mean square of the queries (ExpectedAttention)
  bool hidden = false;  // the method's HiddenScorer on every row's input hidden states (KVzap)
  [[nodiscard]] bool any() const { return window || accumulated || query_moments || hidden; }
};

/// Statistics of the prompt, gathered by the prefill pass (runtime/prefill_stats),
/// holding only what the method's StatsNeeds asked for (other vectors empty).
struct PrefillStats {
  size_t layers = 0, heads = 0, kv_heads = 0, head_dim = 0, n_pos = 0;
  /// The observation window: `window` consecutive query rows, row w at absolute
  /// position window_start + w. Their post-RoPE queries, per layer:
  /// [layers][window][heads][head_dim]. Their attention to the KV of one layer is
  /// computed when that layer is compressed (layer_stats).
  size_t window = 0, window_start = 0;
  std::vector<float> window_queries;
  /// Attention weight received by each position, accumulated over every prompt
  /// query and the query heads of each KV head (H2O): [layers][kv_heads][n_pos].
  std::vector<float> accumulated_attention;
  /// When set (statistics of a verify pass), the accumulated attention is not
  /// stored but is the sum of the window rows' attention.
  bool accumulated_from_window = false;
  /// Per query head, the mean and the mean square of each channel of the post-RoPE
  /// queries over the prompt: [layers][heads][head_dim] each (ExpectedAttention).
  std::vector<float> query_mean, query_sq_mean;
  /// The HiddenScorer's outputs for the positions [hidden_begin, n_pos):
  /// [layers][hidden_outputs][n_pos - hidden_begin] (a prefill scores from 0, a
  /// verify pass its own rows). KVzap reads one score per KV head.
  size_t hidden_outputs = 0, hidden_begin = 0;
  std::vector<float> hidden_scores;

  [[nodiscard]] const float* window_query(size_t l, size_t w, size_t h) const {
    return &window_queries[((l * window + w) * heads + h) * head_dim];
  }
  [[nodiscard]] const float* accumulated(size_t l, size_t g) const {
    return &accumulated_attention[(l * kv_heads + g) * n_pos];
  }
  /// Scores of output o of layer l, from position hidden_begin on.
  [[nodiscard]] const float* hidden(size_t l, size_t o) const {
    return &hidden_scores[(l * hidden_outputs + o) * (n_pos - hidden_begin)];
  }
};

/// The statistics of a slice of one layer (LayerKv) as the methods score them, for
/// positions [0, n_pos): kv_heads are the slice's KV heads and heads their query
/// heads (layer_stats computes them from PrefillStats and the slice's KV).
struct LayerStats {
  size_t heads = 0, kv_heads = 0, head_dim = 0, n_pos = 0;
  /// The window rows' attention weights to every position, summed over the query
  /// heads of each KV head: [kv_heads][window][n_pos] (entries past a row's query
  /// position are 0). Filled when the method needs the window.
  size_t window = 0;
  std::vector<float> window_attention;
  /// [kv_heads][n_pos], when the method needs accumulated attention.
  std::vector<float> accumulated_attention;
  /// [heads][head_dim] each, when the method needs query moments.
  std::vector<float> query_mean, query_sq_mean;
  /// [kv_heads][n_pos], when the method needs hidden-state scores (one per KV head).
  std::vector<float> hidden_scores;

  [[nodiscard]] const float* window_row(size_t g, size_t w) const {
    return &window_attention[(g * window + w) * n_pos];
  }
  [[nodiscard]] const float* accumulated(size_t g) const {
    return &accumulated_attention[g * n_pos];
  }
  [[nodiscard]] const float* hidden(size_t g) const { return &hidden_scores[g * n_pos]; }
};

/// The statistics of the slice `kv` (KV heads kv.first_head.. of layer kv.layer)
/// for positions [0, kv.n_pos), as far as `needs` asks.
/// The window rows' attention is the exact softmax of each query over the positions
/// [0, min(its position, n_pos - 1)] (fp32 dot products with the layer's keys times
/// 1/sqrt(head_dim), exp in double, normalised), summed over the query heads of each
/// KV head. (A verify pass's rows lie past the compressed range: their weights are
/// normalised over it.) Throws vc::Error when `s` lacks what `needs` asks for.
[[nodiscard]] LayerStats layer_stats(const PrefillStats& s, const LayerKv& kv, StatsNeeds needs);

/// Model facts some methods need (kept out of the runtime layer: raw pointers).
struct ModelFacts {
  size_t heads = 0;                      // query heads (GQA groups = heads / kv_heads)
  /// The model's KV shape (layers, kv_heads, head_dim); n_pos is per request.
  size_t layers = 0, kv_heads = 0, head_dim = 0;
  std::vector<float> rope_inv_freq;      // [head_dim / 2] (to undo RoPE: KVQuant)
  std::vector<int32_t> positions;        // absolute position of snapshot index p
  /// Output projection of each layer, [hidden, heads * head_dim] row-major (LaProx).
  struct Matrix {
    const void* data = nullptr;
    DType dtype = DType::bf16;
    size_t rows = 0, cols = 0;
  };
  std::vector<Matrix> wo;
  /// Tensor parallelism: the heads of the other ranks; null for an unsharded model.
  /// A rank's facts are the whole model's (heads, wo) except kv_heads, the KV heads
  /// the rank holds, planned with absolute indices from shards->first_kv_head().
  HeadShards* shards = nullptr;
};

/// What a method plans one layer from.
struct LayerInput {
  const LayerKv& kv;
  const LayerStats* stats = nullptr;  // null when the method needs none
  const ModelFacts& model;
  size_t layers = 0;   // layers of the model (for model-wide budgets)
  double ratio = 4.0;  // target: full KV bytes / compressed KV bytes (bf16 full KV)
};

/// A method's answer for one layer: the kept positions of each KV head, or, for a
/// method that selects model-wide, the layer's scores (select_globally() turns the
/// scores of every layer into keep lists).
struct LayerPlan {
  std::vector<std::vector<int32_t>> keep;  // [kv_heads] ascending positions
  std::vector<float> scores;               // [kv_heads][n_pos], model-wide methods only
  /// Appends a plan of the next heads of the same layer (a later slice).
  void append(LayerPlan&& slice);
};

/// How kept values are stored. bits == 16 means unquantized (bf16).
struct QuantSpec {
  int key_bits = 16;
  int value_bits = 16;
  [[nodiscard]] bool quantized() const { return key_bits < 16 || value_bits < 16; }
};

/// The compressor's answer for a whole request. keep[l][g] lists the kept positions
/// (snapshot indices, ascending) of layer l, KV head g; every other position is
/// dropped.
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

/// How a method that scores tokens picks the ones to keep (kvpress's split of a
/// scorer from its selector): by ratio (a budget of kept_per_head positions per
/// head, or the model-wide budget), or by threshold: every position whose score is
/// >= threshold, the method's own always-kept positions (sinks, observation
/// window), and the `recent` most recent positions. With a threshold the achieved
/// ratio varies per request (CompressedView::full_bytes / stored_bytes says it).
struct TokenSelection {
  bool by_threshold = false;
  double threshold = 0;
  size_t recent = 128;
};

/// One compression method. A method plans layer by layer (plan_layer, a pure
/// function of its input and parameters), so that working memory is about one
/// layer's KV: per-layer methods give the kept positions of a layer at once;
/// methods that rank tokens model-wide give per-layer scores, and select_globally()
/// picks from all of them. Quantizing methods also choose their storage from the
/// kept row counts (plan_quant) and implement quantize(), which the compressed tier
/// calls on the kept rows of each (layer, KV head) to get what it stores.
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
  /// The prefill statistics plan_layer() reads (none by default).
  [[nodiscard]] virtual StatsNeeds stats_needs() const { return {}; }
  /// True when plan_layer() needs statistics of any kind.
  [[nodiscard]] bool needs_stats() const { return stats_needs().any(); }
  /// What the passes run on each row's hidden states when stats_needs().hidden.
  [[nodiscard]] virtual const HiddenScorer* hidden_scorer() const { return nullptr; }
  /// The file beside the model's weights this method loads (KVzap:
  /// "kvzap.safetensors"); empty when it needs none.
  [[nodiscard]] virtual std::string_view model_file() const { return {}; }
  /// Gives the method its surrogate, loaded from model_file() (the runtime does
  /// this when it makes a compressor for a model); vc::Error for a method without one.
  virtual void set_surrogate(std::shared_ptr<const KvzapSurrogate> s);

  /// Plans the KV heads of in.kv (a slice of layer in.kv.layer, of in.layers) from
  /// their KV and statistics; keep and scores cover the slice's heads only.
  [[nodiscard]] virtual LayerPlan plan_layer(const LayerInput& in) const = 0;
  /// True when the kept positions of a layer depend on other layers: plan_layer()
  /// then gives scores, and select_globally() the keep lists.
  [[nodiscard]] virtual bool selects_globally() const { return false; }
  /// Fills the keep lists of `layers` (every layer's plan_layer() answer, in order)
  /// for a request of `shape` at `ratio`.
  virtual void select_globally(std::vector<LayerPlan>& layers, const KvShape& shape,
                               double ratio) const;
  /// True for methods that rank tokens by a score; set_selection applies to them.
  [[nodiscard]] virtual bool scores_tokens() const { return false; }
  /// Ratio or threshold selection (make_compressor sets it from the settings
  /// "threshold" and "keep_recent"); throws vc::Error for a method without scores.
  virtual void set_selection(const TokenSelection& s);
  [[nodiscard]] virtual const TokenSelection& selection() const { return selection_; }
  /// True when the method stores kept rows below bf16 (plan_quant decides how).
  [[nodiscard]] virtual bool quantizes() const { return false; }
  /// True when the method keeps every position (its plan_quant can then run before
  /// any layer is planned).
  [[nodiscard]] virtual bool keeps_every_position() const { return false; }
  /// The precision of the kept rows, rows[l * kv_heads + g] of each (layer, KV head)
  /// of a request of `shape` at `ratio`; records the settings quantize() then uses.
  /// The default stores bf16.
  [[nodiscard]] virtual QuantSpec plan_quant(const KvShape& shape, std::vector<size_t> rows,
                                             double ratio) const;
  /// The bytes the method stores for a request of `shape` at `ratio` with every
  /// (layer, KV head) keeping all shape.n_pos positions, when it can say (the
  /// quantizers: their planned settings' bytes, which exceed full / ratio when
  /// set_param asks for more bits or when no setting fits). Admission by memory
  /// reserves it for a method that keeps every position, else the larger of it and
  /// its generic bound (runtime/fast_memory_need.hpp). Plans on this instance.
  [[nodiscard]] virtual std::optional<size_t> stored_bytes_bound(const KvShape& shape,
                                                                 double ratio) const;
  /// True when the method stores keys before RoPE (KVQuant): its view then holds
  /// each kept row's absolute position beside its index (4 bytes more a row).
  [[nodiscard]] virtual bool stores_keys_before_rope() const { return false; }

  /// Replaces k, v ([n, head_dim] each, rows at absolute `positions`) of layer l, KV
  /// head g by what the method stores, dequantized; returns the stored bytes
  /// (codes + scales + any full-precision rows). The default stores bf16. When
  /// `packed` is given, a codec that can describes there what it stores (and sets
  /// packed->described), such that PackedSide::decode gives back exactly the values
  /// written to k and v; the compressed tier holds that.
  virtual size_t quantize(size_t l, size_t g, const int32_t* positions, size_t n,
                          size_t head_dim, const ModelFacts& model, float* k, float* v,
                          PackedHead* packed = nullptr) const;

 protected:
  /// The positions of one head to keep: by ratio, select_positions(scores, budget,
  /// forced); by threshold, `forced`, the selection's recent window and every
  /// position scoring >= the threshold (NaN never does). Ascending.
  [[nodiscard]] std::vector<int32_t> select_kept(const std::vector<float>& scores, size_t budget,
                                                 const std::vector<int32_t>& forced) const;

 private:
  TokenSelection selection_;
};

/// Threshold selection of one head (see TokenSelection): `forced`, the last
/// `recent` positions and every position with score >= tau; ascending.
[[nodiscard]] std::vector<int32_t> select_by_threshold(const std::vector<float>& scores,
                                                       double tau, size_t recent,
                                                       const std::vector<int32_t>& forced);

/// Every registered method, by name: streaming_llm, snapkv, h2o, expected_attention,
/// kvzip, kvzap, laprox, kivi, kvquant, rotate_kv; and "DROP+QUANT" compositions
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
