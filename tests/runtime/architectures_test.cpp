// Other architectures (Llama-3 rope scaling, sharded Mistral F16, Qwen2 bias + tied,
// Qwen3 q/k norm) against float64 reference logits at every position.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "runtime/forward.hpp"
#include "tests/runtime/test_support.hpp"
#include "tests/kernels/kernel_test_util.hpp"

namespace vc {
namespace {

class architecture : public ::testing::TestWithParam<std::string> {};

TEST_P(architecture, logits_at_every_position_match_the_float64_reference) {
  test::F32PathScope f32;  // f32 tolerances: activations kept in f32
  const std::string dir = std::string(VC_TEST_DATA_DIR) + "/archs/" + GetParam();
  const auto ref = test::read_json(dir + "/reference.json");
  const auto model = Model::load(dir);
  const auto ids = ref["input_ids"].get<std::vector<int32_t>>();
  PagedKvCache cache(model->kv_config(ids.size() + 16, DType::f32, 16));
  Workspace ws(1);
  KvSequence seq;
  cache.reserve(seq, ids.size());
  std::vector<ForwardRow> rows;
  for (size_t i = 0; i < ids.size(); ++i) rows.push_back({ids[i], int32_t(i), &seq, true});
  std::vector<float> logits;
  forward(*model, rows, cache, ws, logits);

  const size_t V = size_t(model->config().vocab_size);
  double worst = 0;
  size_t argmax_equal = 0;
  for (size_t p = 0; p < ids.size(); ++p) {
    const auto r = ref["logits"][p].get<std::vector<double>>();
    ASSERT_EQ(r.size(), V);
    size_t best_ref = 0, best = 0;
    for (size_t v = 0; v < V; ++v) {
      const double e = std::fabs(double(logits[p * V + v]) - r[v]);
      worst = std::max(worst, e);
      // Tolerance for fp32 arithmetic over these weights: tol + |ref| * eps.
      ASSERT_LE(e, 1e-4 + std::fabs(r[v]) * 1e-4) << "position " << p << " token " << v;
      if (r[v] > r[best_ref]) best_ref = v;
      if (logits[p * V + v] > logits[p * V + best]) best = v;
    }
    argmax_equal += best == best_ref;
  }
  EXPECT_EQ(argmax_equal, ids.size());
  std::printf("  %s: max |logit err| %.2e over %zu positions\n", GetParam().c_str(), worst,
              ids.size());
}

INSTANTIATE_TEST_SUITE_P(golden_archs, architecture,
                         ::testing::Values("llama3-rope-scaling", "mistral-sharded-f16",
                                           "qwen2-bias-tied", "qwen3-qknorm"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace vc
