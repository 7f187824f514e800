// KVzap: the surrogate (linear and mlp forms), its fits (ridge regression, the seeded
// mlp trainer), and the compressor's selection by ratio and by threshold from the
// surrogate's scores.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "tests/error_naming.hpp"
#include "kernels/error.hpp"
#include "kvtiers/compressor.hpp"
#include "kvtiers/kvzap/fit.hpp"
#include "kvtiers/kvzap/surrogate.hpp"

namespace vc {
namespace {

struct Lcg {  // uniform in [-1, 1) from a seed
  uint32_t state;
  float next() {
    state = state * 1664525u + 1013904223u;
    return 2.0f * float(state >> 8) / float(1u << 24) - 1.0f;
  }
};

KvzapSamples random_inputs(size_t rows, size_t dim, size_t outputs, uint32_t seed) {
  KvzapSamples s{rows, dim, outputs, {}, {}};
  Lcg r{seed};
  for (size_t i = 0; i < rows * dim; ++i) s.x.push_back(3.0f * r.next());
  s.y.assign(rows * outputs, 0.f);
  return s;
}

using vc::test::expect_error_naming;

TEST(kvzap_fit, ridge_regression_recovers_a_known_linear_map) {
  const size_t dim = 12, G = 3;
  KvzapSamples s = random_inputs(400, dim, G, 5);
  Lcg r{9};
  std::vector<float> w(G * dim), b(G);
  for (float& x : w) x = r.next();
  for (float& x : b) x = 4.0f * r.next();
  for (size_t row = 0; row < s.rows; ++row)
    for (size_t g = 0; g < G; ++g) {
      double y = b[g];
      for (size_t i = 0; i < dim; ++i) y += double(w[g * dim + i]) * s.x[row * dim + i];
      s.y[row * G + g] = float(y);
    }
  const KvzapLayer fit = fit_ridge(s, 0.0);
  for (size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(fit.w1[i], w[i], 1e-4) << "weight " << i;
  for (size_t g = 0; g < G; ++g) EXPECT_NEAR(fit.b1[g], b[g], 1e-4) << "bias " << g;
  KvzapSurrogate m;
  m.dim = dim, m.kv_heads = G, m.layers = {fit};
  EXPECT_NEAR(r_squared(s, predict(m, 0, s)), 1.0, 1e-6);
  // A penalty shrinks the weights (and the fit) a little, never grows them.
  const KvzapLayer shrunk = fit_ridge(s, 10.0);
  double n0 = 0, n1 = 0;
  for (size_t i = 0; i < w.size(); ++i) n0 += fit.w1[i] * fit.w1[i], n1 += shrunk.w1[i] * shrunk.w1[i];
  EXPECT_LT(n1, n0);
}

TEST(kvzap_fit, a_ridge_fit_left_singular_by_too_few_samples_names_lambda) {
  // 8 samples of 256 inputs at lambda 0: the fit's weights overflow (what `calibrate
  // kvzap --lambda 0` on a short text met); the error says what fixes it.
  KvzapSamples s = random_inputs(8, 256, 2, 3);
  Lcg r{4};
  for (float& y : s.y) y = r.next();
  expect_error_naming([&] { (void)fit_ridge(s, 0.0); }, "the fit is not finite: 8 samples of 256 inputs");
  expect_error_naming([&] { (void)fit_ridge(s, 0.0); }, "--lambda");
  EXPECT_NO_THROW((void)fit_ridge(s, 1.0));
}

TEST(kvzap_fit, the_mlp_trainer_fits_a_nonlinear_map_and_is_fixed_by_its_seed) {
  const size_t dim = 6, G = 2;
  KvzapSamples s = random_inputs(512, dim, G, 11);
  for (size_t row = 0; row < s.rows; ++row) {  // |x0| + x1 * x2 and a smooth bump
    const float* x = &s.x[row * dim];
    s.y[row * G + 0] = std::fabs(x[0]) + 0.3f * x[1] * x[2];
    s.y[row * G + 1] = std::exp(-x[3] * x[3]) - 0.5f * x[4];
  }
  MlpTraining t;
  t.units = 24, t.epochs = 60, t.batch = 32, t.lr = 1e-2, t.seed = 7;
  const KvzapLayer a = train_mlp(s, t), b = train_mlp(s, t);
  ASSERT_EQ(a.w1.size(), t.units * dim);
  EXPECT_EQ(0, std::memcmp(a.w1.data(), b.w1.data(), a.w1.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(a.w2.data(), b.w2.data(), a.w2.size() * sizeof(float)));
  t.seed = 8;
  const KvzapLayer c = train_mlp(s, t);
  EXPECT_NE(0, std::memcmp(a.w1.data(), c.w1.data(), a.w1.size() * sizeof(float)));

  KvzapSurrogate mlp;
  mlp.form = KvzapForm::mlp, mlp.dim = dim, mlp.kv_heads = G, mlp.units = t.units, mlp.layers = {a};
  mlp.validate();
  KvzapSurrogate lin;
  lin.dim = dim, lin.kv_heads = G, lin.layers = {fit_ridge(s)};
  const double r2_mlp = r_squared(s, predict(mlp, 0, s)), r2_lin = r_squared(s, predict(lin, 0, s));
  EXPECT_GT(r2_mlp, 0.9);
  EXPECT_GT(r2_mlp, r2_lin + 0.3) << "a linear map cannot fit |x| or a bump";
}

TEST(kvzap_surrogate, scores_a_row_the_same_alone_or_among_other_rows) {
  const size_t dim = 10, G = 2, U = 5;
  Lcg r{3};
  KvzapSurrogate m;
  m.form = KvzapForm::mlp, m.dim = dim, m.kv_heads = G, m.units = U;
  m.layers.resize(2);
  for (KvzapLayer& L : m.layers) {
    for (size_t i = 0; i < U * dim; ++i) L.w1.push_back(r.next());
    for (size_t i = 0; i < U; ++i) L.b1.push_back(r.next());
    for (size_t i = 0; i < G * U; ++i) L.w2.push_back(r.next());
    for (size_t i = 0; i < G; ++i) L.b2.push_back(r.next());
  }
  m.validate();
  std::vector<float> x(7 * dim);
  for (float& v : x) v = r.next();
  std::vector<float> all(7 * G), one(G);
  m.score(1, x.data(), 7, dim, all.data());
  for (size_t row = 0; row < 7; ++row) {
    m.score(1, x.data() + row * dim, 1, dim, one.data());
    EXPECT_EQ(0, std::memcmp(one.data(), &all[row * G], G * sizeof(float))) << "row " << row;
  }
  expect_error_naming([&] { m.score(1, x.data(), 1, dim + 1, one.data()); }, "takes 10");
}

TEST(kvzap_surrogate, a_tensor_of_the_wrong_size_is_named_with_its_layer) {
  KvzapSurrogate m;
  m.dim = 4, m.kv_heads = 2;
  m.layers = {KvzapLayer{std::vector<float>(8), std::vector<float>(2), {}, {}},
              KvzapLayer{std::vector<float>(8), std::vector<float>(3), {}, {}}};
  expect_error_naming([&] { m.validate(); }, "layer 1 tensor bias has 3 values, expected 2");
  m.layers[1].b1 = {0.f, NAN};
  expect_error_naming([&] { m.validate(); }, "layer 1 tensor bias holds a non-finite value");
  expect_error_naming([&] { (void)parse_kvzap_form("cubic"); }, "'cubic'");
}

// One layer of `heads` KV heads and n positions whose surrogate scores are planted.
struct Planted {
  LayerKv kv;
  LayerStats stats;
  ModelFacts facts;
  Planted(size_t heads, size_t n, const std::vector<float>& scores) {
    kv.reshape(0, heads, 4, n);
    stats.heads = heads, stats.kv_heads = heads, stats.head_dim = 4, stats.n_pos = n;
    stats.hidden_scores = scores;
    facts.heads = heads, facts.layers = 1, facts.kv_heads = heads, facts.head_dim = 4;
  }
  LayerPlan plan(const Compressor& c, double ratio) const {
    return c.plan_layer(LayerInput{kv, &stats, facts, 1, ratio});
  }
};

std::vector<int32_t> range(int32_t a, int32_t b) {
  std::vector<int32_t> v;
  for (int32_t p = a; p < b; ++p) v.push_back(p);
  return v;
}

TEST(kvzap, threshold_selection_keeps_every_score_at_least_tau_and_the_recent_window) {
  const size_t n = 200;
  std::vector<float> scores(2 * n);
  for (size_t p = 0; p < n; ++p) {
    scores[p] = -float(p % 7);          // head 0: 0, -1, ..., -6 repeating
    scores[n + p] = p == 3 ? 1.f : -9.f;  // head 1: one position above any tau used
  }
  const Planted c(2, n, scores);
  const auto m = make_compressor("kvzap", {{"threshold", -2.0}, {"keep_recent", 10}});
  const LayerPlan plan = c.plan(*m, 4.0);
  std::vector<int32_t> head0;
  for (int32_t p = 0; p < int32_t(n); ++p)
    if (p % 7 <= 2 || p >= int32_t(n) - 10) head0.push_back(p);
  EXPECT_EQ(plan.keep[0], head0);
  std::vector<int32_t> head1 = {3};
  for (int32_t p : range(int32_t(n) - 10, int32_t(n))) head1.push_back(p);
  EXPECT_EQ(plan.keep[1], head1);
  // The default window is 128 positions.
  const auto dflt = make_compressor("kvzap", {{"threshold", 0.5}});
  std::vector<int32_t> want = {3};
  for (int32_t p : range(int32_t(n) - 128, int32_t(n))) want.push_back(p);
  EXPECT_EQ(c.plan(*dflt, 4.0).keep[1], want);
}

TEST(kvzap, ratio_selection_keeps_the_budget_with_the_recent_window_inside_it) {
  const size_t n = 64;
  std::vector<float> scores(n);
  for (size_t p = 0; p < n; ++p) scores[p] = float(n - p);  // earlier scores higher
  const Planted c(1, n, scores);
  const auto m = make_compressor("kvzap");  // window 128: at most half the budget of 16
  const LayerPlan plan = c.plan(*m, 4.0);
  std::vector<int32_t> want = range(0, 8);
  for (int32_t p : range(56, 64)) want.push_back(p);
  EXPECT_EQ(plan.keep[0], want);
  const auto small = make_compressor("kvzap", {{"keep_recent", 2}});
  want = range(0, 14);
  want.push_back(62), want.push_back(63);
  EXPECT_EQ(c.plan(*small, 4.0).keep[0], want);
}

TEST(kvzap, needs_the_surrogate_scores_and_takes_no_parameters) {
  const auto m = make_compressor("kvzap");
  EXPECT_TRUE(m->stats_needs().hidden);
  EXPECT_EQ(m->hidden_scorer(), nullptr) << "no surrogate until the runtime loads one";
  EXPECT_EQ(m->model_file(), "kvzap.safetensors");
  Planted c(1, 8, std::vector<float>(3));
  expect_error_naming([&] { (void)c.plan(*m, 2.0); }, "do not match");
  expect_error_naming([&] { (void)make_compressor("kvzap", {{"window", 3}}); }, "unknown parameter");
  EXPECT_EQ(make_compressor("kvzap+kivi")->model_file(), "kvzap.safetensors");
  expect_error_naming([&] { make_compressor("snapkv")->set_surrogate(nullptr); },
                      "takes no surrogate");
}

}  // namespace
}  // namespace vc
