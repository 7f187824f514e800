// The prefill statistics collector: only what the method needs, accumulated
// attention close to an exact double-precision reference, queries-only passes that
// never read keys, and prefix sharing that never changes what the statistics see.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/error.hpp"
#include "kvtiers/paged_kv_cache.hpp"
#include "runtime/forward.hpp"
#include "runtime/prefill_stats.hpp"
#include "tests/runtime/test_support.hpp"

namespace vc {
namespace {

TEST(prefill_stats, accumulated_attention_matches_an_exact_softmax_over_every_query) {
  const auto model = test::tinycode();
  const ModelConfig& cfg = model->config();
  const size_t n = 77, H = size_t(cfg.num_heads), G = size_t(cfg.num_kv_heads),
               D = size_t(cfg.head_dim), group = H / G;
  PagedKvCache cache(model->kv_config(256, DType::bf16));
  KvSequence seq;
  cache.reserve(seq, n);
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> k(G * D), v(G * D), q(n * H * D);
  for (size_t p = 0; p < n; ++p) {
    for (float& x : k) x = 2.0f * normal(rng);
    for (float& x : v) x = normal(rng);
    cache.write(0, seq, p, k.data(), v.data());
  }
  for (float& x : q) x = 2.0f * normal(rng);
  cpu::ThreadPool pool(2);
  PrefillStatsCollector c(cfg, n, 8, {.accumulated = true}, &pool);
  EXPECT_TRUE(c.needs_keys());
  EXPECT_TRUE(c.needs_every_query());
  EXPECT_EQ(c.window(), 0u);  // the window was not asked for
  // Two chunks, as a chunked prefill sends them.
  std::vector<ForwardRow> rows;
  for (size_t p = 0; p < n; ++p) rows.push_back(ForwardRow{0, int32_t(p), &seq, false});
  const cpu::PagedKv kv = cache.view(0, seq);
  // Each row's softmax maximum and sum come from the attention itself.
  std::vector<float> out(H * D), max_sum(n * H * 2);
  const float scale = float(1.0 / std::sqrt(double(D)));
  for (size_t p = 0; p < n; ++p)
    cpu::attention_row(&q[p * H * D], H, kv, p + 1, scale, out.data(), nullptr,
                       &max_sum[p * H * 2]);
  EXPECT_THROW(c.observe(0, std::span(rows).first(40), q.data(), &kv, nullptr), Error)
      << "accumulated attention without the rows' maxima and sums";
  c.observe(0, std::span(rows).first(40), q.data(), &kv, max_sum.data());
  c.observe(0, std::span(rows).subspan(40), q.data() + 40 * H * D, &kv,
            max_sum.data() + 40 * H * 2);
  const PrefillStats s = c.finish();
  EXPECT_TRUE(s.window_queries.empty());
  EXPECT_TRUE(s.query_mean.empty());
  std::vector<float> kf(G * D), vf(G * D);
  for (size_t g = 0; g < G; ++g) {
    std::vector<double> want(n, 0.0);
    for (size_t m = 0; m < n; ++m)
      for (size_t j = 0; j < group; ++j) {
        const float* qh = &q[(m * H + g * group + j) * D];
        std::vector<double> e(m + 1);
        double top = -INFINITY, total = 0;
        for (size_t t = 0; t <= m; ++t) {
          cache.read(0, seq, t, kf.data(), vf.data());
          double dot = 0;
          for (size_t d = 0; d < D; ++d) dot += double(qh[d]) * double(kf[g * D + d]);
          e[t] = dot / std::sqrt(double(D));
          top = std::max(top, e[t]);
        }
        for (size_t t = 0; t <= m; ++t) total += e[t] = std::exp(e[t] - top);
        for (size_t t = 0; t <= m; ++t) want[t] += e[t] / total;
      }
    for (size_t t = 0; t < n; ++t)
      EXPECT_NEAR(s.accumulated(0, g)[t], want[t], 1e-4 + 1e-4 * want[t]) << "head " << g << " position " << t;
  }
}

TEST(prefill_stats, window_and_moment_statistics_read_queries_only) {
  const auto model = test::tinycode();
  const ModelConfig& cfg = model->config();
  const size_t n = 20, HD = size_t(cfg.num_heads * cfg.head_dim);
  PrefillStatsCollector c(cfg, n, 4, PrefillStatsCollector::kVerifyNeeds);
  EXPECT_FALSE(c.needs_keys());
  std::vector<ForwardRow> rows;
  std::vector<float> q(n * HD);
  for (size_t p = 0; p < n; ++p) {
    rows.push_back(ForwardRow{0, int32_t(p), nullptr, false});
    for (size_t i = 0; i < HD; ++i) q[p * HD + i] = float(p) + 0.001f * float(i);
  }
  for (size_t l = 0; l < size_t(cfg.num_layers); ++l) c.observe(l, rows, q.data(), nullptr, nullptr);
  const PrefillStats s = c.finish();
  ASSERT_EQ(s.window, 4u);
  EXPECT_EQ(s.window_start, 16u);
  EXPECT_EQ(s.window_query(2, 1, 0)[0], 17.0f);
  EXPECT_NEAR(s.query_mean[0], 9.5f, 1e-5);  // mean of 0..19
  EXPECT_TRUE(s.accumulated_attention.empty());
  // A refold of [0, 17) keeps the rows of queries 16 and 17 (the accepted ones) and
  // derives accumulated attention from them.
  const PrefillStats t = PrefillStatsCollector::trim(s, 18, 17);
  EXPECT_EQ(t.window, 2u);
  EXPECT_EQ(t.n_pos, 17u);
  EXPECT_TRUE(t.accumulated_from_window);
  EXPECT_EQ(t.window_query(3, 1, 0)[0], 17.0f);
}

TEST(prefill_stats, a_prompt_whose_statistics_read_every_query_shares_no_prefix) {
  const auto model = test::tinycode();
  std::mt19937 rng(9);
  const auto prompt = test::random_tokens(rng, 120, 2048, 2046);
  PagedKvCache cache(model->kv_config(1024, DType::bf16));
  Workspace ws(2);
  KvSequence first;
  (void)prefill(*model, prompt, first, cache, ws);  // published for sharing
  const size_t n = prompt.size();
  for (const StatsNeeds needs : {StatsNeeds{.window = true}, StatsNeeds{.accumulated = true},
                                 StatsNeeds{.query_moments = true}}) {
    PrefillStatsCollector c(model->config(), n, 32, needs, &ws.pool());
    KvSequence seq;
    const size_t before = cache.pool().used_blocks();
    ws.stats = &c;
    (void)prefill(*model, prompt, seq, cache, ws);
    ws.stats = nullptr;
    const size_t fresh = cache.pool().used_blocks() - before;
    if (needs.window) {
      EXPECT_LT(fresh, seq.blocks.size()) << "a window-only method may share up to n - window";
    } else {
      EXPECT_EQ(fresh, seq.blocks.size()) << "every block computed";
    }
    cache.free(seq);
  }
  cache.free(first);
}

}  // namespace
}  // namespace vc
