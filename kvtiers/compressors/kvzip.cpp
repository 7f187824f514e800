// KVzip-style token dropping (a stated approximation).
// Paper: J.-H. Kim, J. Kim, S. Kwon, J. W. Lee, S. Yun, H. O. Song, "KVzip:
// Query-Agnostic KV Cache Compression with Context Reconstruction", arXiv 2505.23416.
// KVzip scores each KV pair by the MAXIMUM attention it receives (over the queries and
// the query heads of its group) while the model re-reads its own context in a
// reconstruction pass, and keeps the top pairs: importance is "needed by at least one
// query", not "attended to on average", and it does not depend on any particular
// future question (query-agnostic).
// We have no reconstruction pass, so we approximate that maximum from the prompt pass
// statistics, per (layer, KV head g) and position p:
//   window_max(p) = max over the rows w of PrefillStats::window_attention of
//                   window_row(g, w)[p]   (max, not SnapKV's sum, over the window queries)
//   mean_recv(p)  = accumulated_attention(g)[p] / (n_pos - p)
//                   (the mean over the n_pos - p prompt queries that can attend to p)
//   score(p)      = max(window_max(p), mean_recv(p)).
// Both terms are lower bounds of the true maximum over all prompt queries (a maximum
// over a subset, and a mean), so score(p) is the tightest bound these statistics give
// of "the largest attention any context query pays to p", standing in for KVzip's
// maximum over the reconstruction queries (which re-read the same context). Weights
// are summed over the group's query heads as the statistics store them, not maxed.
// Kept: the top kept_per_head(n_pos, ratio) positions per head; no sinks or windows
// are forced (as in KVzip). The method has no parameters.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>

#include "kernels/error.hpp"
#include "kvtiers/compressor.hpp"
#include "kvtiers/compressors/factories.hpp"
#include "kvtiers/compressors/kvzip_score.hpp"

namespace vc {
namespace {

/// KVzip-style: maximum attention received, from the prompt pass statistics.
class KvZip final : public Compressor {
 public:
  [[nodiscard]] std::string_view name() const override { return "kvzip"; }
  [[nodiscard]] bool scores_tokens() const override { return true; }
  [[nodiscard]] std::string_view summary() const override {
    return "keep the positions with the largest maximum attention received from any "
           "prompt query (approximating KVzip, Kim et al., arXiv 2505.23416)";
  }
  [[nodiscard]] std::vector<CompressorParam> params() const override { return {}; }
  void set_param(const std::string& name, double /*value*/) override {
    throw Error("kvzip: unknown parameter '" + name + "' (kvzip has no parameters)");
  }
  [[nodiscard]] StatsNeeds stats_needs() const override {
    return {.window = true, .accumulated = true};
  }

  [[nodiscard]] LayerPlan plan_layer(const LayerInput& in) const override {
    const LayerKv& kv = in.kv;
    const LayerStats* s = in.stats;
    if (s == nullptr) throw Error("kvzip: needs PrefillStats (none were gathered)");
    if (s->kv_heads != kv.kv_heads || s->n_pos != kv.n_pos) {
      throw Error("kvzip: PrefillStats shape (kv_heads, n_pos) does not match the KV");
    }
    if (s->window_attention.size() != kv.kv_heads * s->window * kv.n_pos) {
      throw Error("kvzip: PrefillStats.window_attention has the wrong size");
    }
    if (s->accumulated_attention.size() != kv.kv_heads * kv.n_pos) {
      throw Error("kvzip: PrefillStats.accumulated_attention has the wrong size");
    }
    const size_t n = kv.n_pos;
    LayerPlan plan;
    plan.keep.assign(kv.kv_heads, {});
    if (n == 0) return plan;
    const size_t budget = std::min(kept_per_head(n, in.ratio), n);
    std::vector<float> scores(n);
    for (size_t g = 0; g < kv.kv_heads; ++g) {
      kvzip_scores(*s, g, scores);
      for (float& x : scores) {
        if (std::isnan(x)) x = std::numeric_limits<float>::lowest();
      }
      plan.keep[g] = select_kept(scores, budget, {});
    }
    return plan;
  }
};

}  // namespace

void kvzip_scores(const LayerStats& s, size_t g, std::vector<float>& out) {
  const size_t n = s.n_pos;
  out.resize(n);
  const float* acc = s.accumulated(g);
  for (size_t p = 0; p < n; ++p) out[p] = acc[p] / float(n - p);
  for (size_t w = 0; w < s.window; ++w) {
    const float* row = s.window_row(g, w);
    for (size_t p = 0; p < n; ++p) out[p] = std::max(out[p], row[p]);
  }
}

std::unique_ptr<Compressor> make_kvzip() { return std::make_unique<KvZip>(); }

}  // namespace vc
