// The token-dropping compressors (StreamingLLM, SnapKV, H2O, ExpectedAttention,
// KVzip-style, LaProx-style) on hand-made snapshots and statistics whose right answer
// is known, plus the plan invariants every method must honour.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "tests/error_naming.hpp"
#include "kernels/dtype.hpp"
#include "kernels/error.hpp"
#include "kvtiers/compressor.hpp"
#include "kvtiers/compressors/factories.hpp"
#include "kvtiers/layer_compression.hpp"

namespace vc {
namespace {

/// A request's KV, per-layer statistics and model facts (W_o f32), shaped
/// consistently; values from a fixed pseudo-random sequence unless a test plants its
/// own. Plans go through the layer-by-layer path (plan_snapshot).
struct Case {
  KvSnapshot kv;
  std::vector<LayerStats> stats;  // [layers]
  ModelFacts model;
  std::vector<float> wo;  // backing store of model.wo
  uint32_t state = 12345;
  float next() {  // uniform in [0, 1)
    state = state * 1664525u + 1013904223u;
    return float(state >> 8) / float(1u << 24);
  }
  Case(size_t layers, size_t kv_heads, size_t heads, size_t d, size_t n, size_t window) {
    kv = KvSnapshot{layers, kv_heads, d, n, {}, {}};
    stats.assign(layers, LayerStats{heads, kv_heads, d, n, window, {}, {}, {}, {}, {}});
    for (size_t i = 0; i < layers * kv_heads * n * d; ++i) kv.k.push_back(2 * next() - 1);
    for (size_t i = 0; i < layers * kv_heads * n * d; ++i) kv.v.push_back(2 * next() - 1);
    for (size_t lg = 0; lg < layers * kv_heads; ++lg) {
      LayerStats& s = stats[lg / kv_heads];
      for (size_t w = 0, q = n - window; w < window; ++w, ++q) {  // row w: query q, causal
        for (size_t p = 0; p < n; ++p) {
          s.window_attention.push_back(p <= q ? next() / float(q + 1) : 0.0f);
        }
      }
      for (size_t p = 0; p < n; ++p) s.accumulated_attention.push_back(next() * float(n - p));
    }
    for (size_t i = 0; i < layers * heads * d; ++i) {
      LayerStats& s = stats[i / (heads * d)];
      s.query_mean.push_back(2 * next() - 1);
      s.query_sq_mean.push_back(s.query_mean.back() * s.query_mean.back() + next());
    }
    model.heads = heads;
    const size_t dim = heads * d, size = dim * dim;  // hidden = heads * head_dim
    for (size_t i = 0; i < layers * size; ++i) wo.push_back(2 * next() - 1);
    for (size_t l = 0; l < layers; ++l) model.wo.push_back({&wo[l * size], DType::f32, dim, dim});
  }

  float& row(size_t l, size_t g, size_t w, size_t p) {
    return stats[l].window_attention[(g * stats[l].window + w) * kv.n_pos + p];
  }
  float& acc(size_t l, size_t g, size_t p) {
    return stats[l].accumulated_attention[g * kv.n_pos + p];
  }
  [[nodiscard]] CompressionPlan plan(const Compressor& m, double ratio) const {
    return plan_snapshot(m, kv, planted_stats(stats), model, ratio);
  }
  [[nodiscard]] CompressionPlan plan_without_stats(const Compressor& m, double ratio) const {
    return plan_snapshot(m, kv, {}, model, ratio);
  }
};

using Factory = std::function<std::unique_ptr<Compressor>()>;
const std::vector<std::pair<std::string, Factory>> kMethods = {
    {"streaming_llm", make_streaming_llm}, {"snapkv", make_snapkv},
    {"h2o", make_h2o},                     {"expected_attention", make_expected_attention},
    {"kvzip", make_kvzip},                 {"laprox", make_laprox}};

bool contains(const std::vector<int32_t>& v, int32_t p) {
  return std::find(v.begin(), v.end(), p) != v.end();
}

/// A method with parameters set.
std::unique_ptr<Compressor> with(const Factory& make,
                                 const std::vector<std::pair<std::string, double>>& ps) {
  auto m = make();
  for (const auto& [name, value] : ps) m->set_param(name, value);
  return m;
}

std::vector<int32_t> range(int32_t from, int32_t to) {  // [from, to)
  std::vector<int32_t> out(size_t(to - from));
  std::iota(out.begin(), out.end(), from);
  return out;
}

/// Runs `f`, expecting a vc::Error whose message names `word`.
using vc::test::expect_error_naming;

TEST(token_drop, every_method_keeps_ascending_unique_in_range_positions_within_its_budget) {
  const Case c(2, 2, 4, 8, 50, 8);
  for (const auto& [name, make] : kMethods) {
    auto m = make();
    EXPECT_EQ(m->name(), name);
    EXPECT_EQ(m->needs_stats(), name != "streaming_llm") << name;
    if (m->needs_stats()) {  // refuses to plan without statistics
      EXPECT_THROW((void)c.plan_without_stats(*m, 4.0), Error) << name;
    }
    for (double ratio : {1.0, 2.0, 3.0, 4.0, 8.0, 100.0}) {
      const CompressionPlan plan = c.plan(*m, ratio);
      const size_t budget = kept_per_head(c.kv.n_pos, ratio);
      EXPECT_FALSE(plan.quant.quantized());
      ASSERT_EQ(plan.keep.size(), c.kv.layers) << name;
      size_t total = 0;
      for (const auto& layer : plan.keep) {
        ASSERT_EQ(layer.size(), c.kv.kv_heads) << name;
        for (const auto& keep : layer) {
          ASSERT_FALSE(keep.empty()) << name << " ratio " << ratio;
          EXPECT_TRUE(keep.front() >= 0 && keep.back() < int32_t(c.kv.n_pos)) << name;
          EXPECT_TRUE(std::is_sorted(keep.begin(), keep.end(), std::less_equal<>()))
              << name << " ratio " << ratio << ": not strictly ascending";
          EXPECT_TRUE(name == "laprox" || keep.size() == budget) << name << " ratio " << ratio;
          total += keep.size();
        }
      }
      EXPECT_EQ(total, budget * c.kv.layers * c.kv.kv_heads) << name << " ratio " << ratio;
    }
  }
}

TEST(token_drop, set_param_with_an_unknown_name_throws_naming_it) {
  for (const auto& [name, make] : kMethods) {
    auto m = make();
    expect_error_naming([&] { m->set_param("no_such_knob", 1); }, "no_such_knob");
    for (const auto& p : m->params()) m->set_param(p.name, p.value);  // reported ones are accepted
  }
}

TEST(token_drop, a_bad_parameter_value_throws_naming_it_and_params_report_good_ones) {
  const std::vector<std::tuple<Factory, std::string, double>> bad = {
      {make_streaming_llm, "sinks", -1},  {make_streaming_llm, "sinks", 2.5},
      {make_snapkv, "kernel", 4},         {make_snapkv, "window", 0},
      {make_h2o, "recent_fraction", 1.5}, {make_expected_attention, "sinks", -3},
      {make_laprox, "min_per_head", 0.5}, {make_laprox, "recent", -1}};
  for (const auto& [make, param, value] : bad) {
    auto m = make();
    expect_error_naming([&] { m->set_param(param, value); }, param);
  }
  const auto snapkv = with(make_snapkv, {{"kernel", 5}})->params();
  EXPECT_EQ(snapkv.at(1).name, "kernel");
  EXPECT_EQ(snapkv.at(1).value, 5);
  EXPECT_EQ(make_h2o()->params().at(0).value, 0.5);
  EXPECT_EQ(make_laprox()->params().size(), 3u);
}

TEST(streaming_llm, sinks_and_the_recent_window_survive_and_nothing_else) {
  const Case c(2, 2, 2, 4, 64, 4);
  auto m = make_streaming_llm();
  for (double ratio : {2.0, 4.0, 8.0}) {
    const size_t budget = kept_per_head(64, ratio);
    ASSERT_GT(budget, 4u);
    std::vector<int32_t> want = range(0, 4), recent = range(int32_t(64 - (budget - 4)), 64);
    want.insert(want.end(), recent.begin(), recent.end());
    const CompressionPlan plan = c.plan_without_stats(*m, ratio);
    for (const auto& layer : plan.keep) {
      for (const auto& keep : layer) EXPECT_EQ(keep, want) << "ratio " << ratio;
    }
  }
  m->set_param("sinks", 100);  // a budget smaller than the sinks keeps the first positions
  const size_t budget = kept_per_head(64, 16.0);
  EXPECT_EQ(c.plan_without_stats(*m, 16.0).keep[0][0], range(0, int32_t(budget)));
}

TEST(h2o, a_planted_heavy_hitter_survives_while_its_neighbour_does_not) {
  Case c(1, 1, 1, 4, 64, 4);
  for (size_t p = 0; p < 64; ++p) c.acc(0, 0, p) = float(64 - p) * 0.01f;  // causal decay
  c.acc(0, 0, 30) = 100.0f;
  const auto keep = c.plan(*make_h2o(), 4.0).keep[0][0];
  EXPECT_TRUE(contains(keep, 30));
  EXPECT_FALSE(contains(keep, 29) || contains(keep, 31));  // its neighbours are ordinary
  EXPECT_TRUE(contains(keep, 63));  // recent window
  EXPECT_TRUE(contains(keep, 0));   // next heaviest
  EXPECT_EQ(keep.size(), kept_per_head(64, 4.0));
}

TEST(snapkv, keeps_what_the_window_attends_to_strongly_and_pooling_keeps_its_neighbours) {
  Case c(1, 1, 1, 4, 64, 8);
  for (size_t w = 0; w < 8; ++w) {
    for (size_t p = 0; p < 64; ++p) c.row(0, 0, w, p) = p >= 40 && p < 48 ? 0.01f : 0.001f;
    c.row(0, 0, w, 20) = 0.5f;  // and a mildly attended far block 40..47
  }
  const size_t budget = kept_per_head(64, 4.0);
  ASSERT_GE(budget, 8u + 8u);
  auto m = with(make_snapkv, {{"window", 8}, {"kernel", 1}});
  const auto plain = c.plan(*m, 4.0).keep[0][0];
  EXPECT_TRUE(contains(plain, 20));
  EXPECT_FALSE(contains(plain, 19));  // without pooling the far block outranks neighbours
  EXPECT_TRUE(contains(plain, 63));   // observation window
  m->set_param("kernel", 7);
  const auto pooled = c.plan(*m, 4.0).keep[0][0];
  for (int32_t p : range(17, 24)) EXPECT_TRUE(contains(pooled, p)) << p;
  for (int32_t p : range(56, 64)) EXPECT_TRUE(contains(pooled, p)) << p;
  EXPECT_EQ(pooled.size(), budget);
}

TEST(snapkv, only_the_last_window_rows_vote) {
  Case c(1, 1, 1, 4, 64, 8);
  for (size_t w = 0; w < 8; ++w) {  // old rows look only at 10, recent rows at 30 and a bit
    for (size_t p = 0; p < 64; ++p) c.row(0, 0, w, p) = w < 4 ? 0.0f : 0.001f;
    c.row(0, 0, w, 10) = w < 4 ? 1.0f : 0.0f;
    c.row(0, 0, w, 30) = w < 4 ? 0.0f : 1.0f;
  }
  auto m = with(make_snapkv, {{"window", 4}, {"kernel", 1}});
  const auto keep = c.plan(*m, 4.0).keep[0][0];
  EXPECT_TRUE(contains(keep, 30));
  EXPECT_FALSE(contains(keep, 10));
}

TEST(expected_attention, keeps_a_key_aligned_with_the_query_mean_over_an_orthogonal_one) {
  Case c(1, 1, 2, 4, 16, 4);
  for (size_t i = 0; i < 8; ++i) {  // both query heads: mean 3 e0, no variance
    c.stats[0].query_mean[i] = i % 4 == 0 ? 3.0f : 0.0f;
    c.stats[0].query_sq_mean[i] = i % 4 == 0 ? 9.0f : 0.0f;
  }
  for (size_t p = 0; p < 16; ++p) {  // 10 aligned with the mean, 11 orthogonal, others opposed
    float* k = &c.kv.k[c.kv.index(0, 0, p)];
    float* v = &c.kv.v[c.kv.index(0, 0, p)];
    for (size_t i = 0; i < 4; ++i) k[i] = v[i] = 0.0f;
    k[0] = p == 10 ? 1.0f : (p == 11 ? 0.0f : -1.0f);
    k[1] = p == 11 ? 1.0f : 0.0f;
    v[2] = 1.0f;
  }
  auto m = with(make_expected_attention, {{"sinks", 0}});
  ASSERT_EQ(kept_per_head(16, 16.0), 1u);
  EXPECT_EQ(c.plan(*m, 16.0).keep[0][0], std::vector<int32_t>{10});
  EXPECT_EQ(c.plan(*m, 8.0).keep[0][0], (std::vector<int32_t>{10, 11}));
  m->set_param("sinks", 4);  // sinks kept on top of the best scores
  EXPECT_EQ(c.plan(*m, 16.0 / 5.0).keep[0][0], (std::vector<int32_t>{0, 1, 2, 3, 10}));
  c.kv.v[c.kv.index(0, 0, 11) + 2] = 100.0f;  // scores are scaled by |v| (as in kvpress)
  EXPECT_EQ(c.plan(*m, 16.0 / 5.0).keep[0][0], (std::vector<int32_t>{0, 1, 2, 3, 11}));
}

TEST(kvzip, keeps_a_position_with_one_very_high_attention_though_its_sum_is_small) {
  Case c(1, 1, 1, 4, 32, 4);
  for (size_t w = 0; w < 4; ++w) {
    for (size_t p = 0; p < 32; ++p) c.row(0, 0, w, p) = p <= 28 + w ? 0.02f : 0.0f;
  }
  c.row(0, 0, 0, 5) = 0.9f;  // one query attends to 5 very strongly...
  for (size_t p = 0; p < 32; ++p) c.acc(0, 0, p) = p == 5 ? 1.0f : 2.0f;  // ...its sum is least
  const auto keep = c.plan(*make_kvzip(), 4.0).keep[0][0];
  EXPECT_TRUE(contains(keep, 5));
  EXPECT_EQ(keep.size(), kept_per_head(32, 4.0));
  auto h2o = with(make_h2o, {{"recent_fraction", 0}});  // a sum-based method drops it
  EXPECT_FALSE(contains(c.plan(*h2o, 4.0).keep[0][0], 5));
}

/// KV heads of one query head, d = 2, W_o = I (bf16), uniform attention, every v = e0.
struct LaproxCase : Case {
  std::vector<uint16_t> wo16;
  LaproxCase(size_t layers, size_t kv_heads, size_t n) : Case(layers, kv_heads, kv_heads, 2, n, 1) {
    const size_t dim = kv_heads * 2;
    wo16.assign(layers * dim * dim, f32_to_bf16(0.0f));
    for (size_t l = 0; l < layers; ++l) {
      for (size_t i = 0; i < dim; ++i) wo16[(l * dim + i) * dim + i] = f32_to_bf16(1.0f);
      model.wo[l] = {&wo16[l * dim * dim], DType::bf16, dim, dim};
    }
    for (LayerStats& s : stats)
      std::fill(s.window_attention.begin(), s.window_attention.end(), 1.0f / float(n));
    for (size_t i = 0; i < kv.v.size(); ++i) kv.v[i] = i % 2 == 0 ? 1.0f : 0.0f;
  }
  void set_v(size_t l, size_t g, size_t p, float x) { kv.v[kv.index(l, g, p)] = x; }
};

TEST(laprox, keeps_the_largest_output_contribution_over_the_most_attended_token) {
  LaproxCase c(1, 1, 16);
  c.row(0, 0, 0, 3) = 0.5f;  // most attended, |W_o v| = 1
  c.row(0, 0, 0, 7) = 0.1f;  // less attended, |W_o v| = 20
  c.set_v(0, 0, 7, 20.0f);
  ASSERT_EQ(kept_per_head(16, 16.0), 1u);
  auto m = with(make_laprox, {{"sinks", 0}, {"recent", 0}, {"min_per_head", 0}});
  EXPECT_EQ(c.plan(*m, 16.0).keep[0][0], std::vector<int32_t>{7});
  auto snap = with(make_snapkv, {{"window", 1}, {"kernel", 1}});  // attention alone: 3 (+ 15)
  EXPECT_EQ(c.plan(*snap, 8.0).keep[0][0], (std::vector<int32_t>{3, 15}));
}

TEST(laprox, global_selection_gives_more_positions_to_heads_with_larger_contributions) {
  LaproxCase c(2, 2, 32);
  for (size_t p = 0; p < 32; ++p) c.set_v(0, 0, p, 10.0f);  // layer 0, head 0: 10x output
  const size_t budget = kept_per_head(32, 4.0);
  auto m = with(make_laprox, {{"sinks", 0}, {"recent", 0}, {"min_per_head", 1}});
  const CompressionPlan plan = c.plan(*m, 4.0);
  const size_t n00 = plan.keep[0][0].size(), n01 = plan.keep[0][1].size();
  const size_t n10 = plan.keep[1][0].size(), n11 = plan.keep[1][1].size();
  EXPECT_EQ(n00 + n01 + n10 + n11, 4 * budget);  // the model-wide budget
  EXPECT_GT(n00, budget);
  EXPECT_LT(n01, budget);
  EXPECT_GE(n01, 1u);   // the floor
  EXPECT_EQ(n10, n11);  // equal heads in layer 1 share alike
}

TEST(laprox, sinks_and_the_recent_window_are_always_kept) {
  LaproxCase c(1, 2, 64);
  for (size_t p = 0; p < 64; ++p) c.set_v(0, 0, p, 100.0f);
  const CompressionPlan plan = c.plan(*make_laprox(), 4.0);
  for (const auto& keep : plan.keep[0]) {
    for (int32_t p : range(0, 4)) EXPECT_TRUE(contains(keep, p));
    for (int32_t p : range(56, 64)) EXPECT_TRUE(contains(keep, p));
  }
  EXPECT_GT(plan.keep[0][0].size(), plan.keep[0][1].size());
}

TEST(laprox, planning_without_output_projections_is_an_error) {
  Case c(1, 1, 1, 4, 16, 4);
  c.model.wo.clear();
  expect_error_naming([&] { (void)c.plan(*make_laprox(), 4.0); }, "wo");
}


// ---- threshold selection (TokenSelection): the selector every scorer shares ----

TEST(threshold_selection, keeps_exactly_the_positions_scoring_at_least_tau) {
  Case c(1, 1, 1, 4, 32, 4);
  for (size_t w = 0; w < 4; ++w)
    for (size_t p = 0; p < 32; ++p) c.row(0, 0, w, p) = 0.0f;
  // KVzip's score is max(acc / (n - p), window rows): here (p % 5) / 10.
  for (size_t p = 0; p < 32; ++p) c.acc(0, 0, p) = float(p % 5) / 10.0f * float(32 - p);
  std::vector<int32_t> expected;
  for (int32_t p = 0; p < 32; ++p)
    if (p % 5 >= 3) expected.push_back(p);
  const auto m = make_compressor("kvzip", {{"threshold", 0.25}, {"keep_recent", 0}});
  EXPECT_EQ(c.plan(*m, 4.0).keep[0][0], expected);
  EXPECT_EQ(c.plan(*m, 16.0).keep[0][0], expected) << "the ratio plays no part";
  // The recent window is kept on top.
  const auto recent = make_compressor("kvzip", {{"threshold", 0.25}, {"keep_recent", 4}});
  for (int32_t p : {28, 29, 30, 31})
    if (!contains(expected, p)) expected.push_back(p);
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(c.plan(*recent, 4.0).keep[0][0], expected);
}

TEST(threshold_selection, select_by_threshold_keeps_forced_recent_and_scores_at_least_tau) {
  const std::vector<float> scores = {0.5f, 0.1f, std::nanf(""), 0.3f, 0.2f, 0.9f, 0.0f};
  EXPECT_EQ(select_by_threshold(scores, 0.3, 0, {}), (std::vector<int32_t>{0, 3, 5}));
  EXPECT_EQ(select_by_threshold(scores, 0.3, 2, {1}), (std::vector<int32_t>{0, 1, 3, 5, 6}));
  EXPECT_EQ(select_by_threshold(scores, 2.0, 0, {}), std::vector<int32_t>{});
}

TEST(threshold_selection, lowering_tau_keeps_a_superset_for_every_scoring_method) {
  Case c(2, 2, 4, 4, 48, 8);
  for (const char* name : {"snapkv", "h2o", "expected_attention", "kvzip", "laprox"}) {
    const auto by_ratio = make_compressor(name);
    // A tau between the scores: the median of what the ratio plan keeps is unknown
    // per method, so sweep a wide range and check the nesting and both extremes.
    std::vector<CompressionPlan> plans;
    for (double tau : {1e30, 1.0, 0.1, 0.01, 1e-3, -1e30})
      plans.push_back(c.plan(*make_compressor(name, {{"threshold", tau}, {"keep_recent", 2}}), 4.0));
    for (size_t l = 0; l < 2; ++l)
      for (size_t g = 0; g < 2; ++g) {
        for (size_t i = 1; i < plans.size(); ++i)
          for (int32_t p : plans[i - 1].keep[l][g])
            EXPECT_TRUE(contains(plans[i].keep[l][g], p)) << name << " tau step " << i;
        EXPECT_EQ(plans.back().keep[l][g].size(), 48u) << name << ": tau -1e30 keeps everything";
        EXPECT_LT(plans.front().keep[l][g].size(), 48u) << name << ": tau 1e30 drops";
      }
  }
}

TEST(threshold_selection, applies_to_scorers_and_compositions_and_is_refused_by_the_others) {
  for (const char* name : {"snapkv", "h2o", "expected_attention", "kvzip", "laprox", "snapkv+kivi"}) {
    const auto m = make_compressor(name, {{"threshold", 0.5}});
    EXPECT_TRUE(m->selection().by_threshold) << name;
    EXPECT_EQ(m->selection().recent, 128u) << name;
  }
  for (const char* name : {"streaming_llm", "kivi", "streaming_llm+kivi"})
    expect_error_naming([&] { (void)make_compressor(name, {{"threshold", 0.5}}); },
                        "threshold selection needs a method that scores tokens");
  expect_error_naming([&] { (void)make_compressor("snapkv", {{"keep_recent", -1}}); }, "keep_recent");
}

TEST(threshold_selection, an_unknown_parameter_of_a_scorer_lists_the_selections_too) {
  expect_error_naming([&] { (void)make_compressor("snapkv", {{"nosuch", 1}}); },
                      "(known: window, kernel); and, for selection, threshold, keep_recent");
  // A method that does not score tokens takes no selection: its list alone.
  try {
    (void)make_compressor("kivi", {{"nosuch", 1}});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).find("threshold"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace vc
