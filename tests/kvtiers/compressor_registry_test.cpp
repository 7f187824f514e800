// The compressor registry (make_compressor, compressor_names), the ratio -> bits
// mapping and parameters of the quantizers, keep_top / kept_per_head, and
// drop+quantize composition.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "kernels/error.hpp"
#include "kvtiers/compressor.hpp"
#include "kvtiers/layer_compression.hpp"
#include "kvtiers/compressors/factories.hpp"
#include "kvtiers/compressors/uniform_quant.hpp"

namespace vc {
namespace {

std::vector<float> normal(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& e : x) e = dist(rng);
  return x;
}

std::vector<int32_t> iota_positions(size_t n) {
  std::vector<int32_t> p(n);
  std::iota(p.begin(), p.end(), 0);
  return p;
}

KvSnapshot snapshot(size_t layers, size_t heads, size_t n_pos, size_t d) {
  KvSnapshot kv;
  kv.layers = layers, kv.kv_heads = heads, kv.n_pos = n_pos, kv.head_dim = d;
  kv.k = normal(layers * heads * n_pos * d, 13);
  kv.v = normal(layers * heads * n_pos * d, 14);
  return kv;
}

TEST(quantizers, ratios_2_4_8_map_to_8_4_2_bits_and_set_param_overrides) {
  EXPECT_EQ(bits_for_ratio(2), 8);
  EXPECT_EQ(bits_for_ratio(4), 4);
  EXPECT_EQ(bits_for_ratio(5), 3);
  EXPECT_EQ(bits_for_ratio(8), 2);
  EXPECT_EQ(bits_for_ratio(1.5), 8);
  EXPECT_EQ(bits_for_ratio(16), 2);
  EXPECT_THROW((void)bits_for_ratio(0.5), Error);
  const KvSnapshot kv = snapshot(2, 2, 16, 64);
  const ModelFacts model{};
  for (const char* name : {"kivi", "kvquant", "rotate_kv"}) {
    auto c = make_compressor(name);
    for (auto [ratio, bits] : {std::pair{2.0, 8}, {4.0, 4}, {8.0, 2}}) {
      const CompressionPlan p = plan_snapshot(*c, kv, {}, model, ratio);
      EXPECT_EQ(p.quant.key_bits, bits) << name << " " << ratio;
      EXPECT_EQ(p.quant.value_bits, bits) << name << " " << ratio;
      ASSERT_EQ(p.keep.size(), 2u);
      EXPECT_EQ(p.keep[1][1].size(), 16u);
      EXPECT_EQ(c->params()[0].value, double(bits));
    }
    c->set_param("key_bits", 3);
    const CompressionPlan p = plan_snapshot(*c, kv, {}, model, 2.0);
    EXPECT_EQ(p.quant.key_bits, 3) << name;
    EXPECT_EQ(p.quant.value_bits, 8) << name;
    c->set_param("key_bits", 0);  // back to the ratio
    EXPECT_EQ(plan_snapshot(*c, kv, {}, model, 8.0).quant.key_bits, 2);
    EXPECT_THROW(c->set_param("key_bits", 12), Error);
  }
}

TEST(quantizers, an_unknown_parameter_throws_naming_it) {
  for (const char* name : {"kivi", "kvquant", "rotate_kv", "streaming_llm+kivi"}) {
    auto c = make_compressor(name);
    try {
      c->set_param("bogus_knob", 1);
      FAIL() << name;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("bogus_knob"), std::string::npos) << e.what();
    }
  }
}

TEST(keep_top, keeps_the_top_scores_plus_always_with_ties_by_lower_position) {
  const std::vector<float> s = {0.1f, 0.9f, 0.5f, 0.9f, 0.2f, 0.5f, 0.0f, 0.3f};
  EXPECT_EQ(keep_top(s, 3), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(keep_top(s, 4, {7, 0}), (std::vector<int32_t>{0, 1, 3, 7}));
  EXPECT_EQ(keep_top(s, 4, {7, 0, 7}), (std::vector<int32_t>{0, 1, 3, 7}));
  EXPECT_EQ(keep_top(s, 2, {6, 5, 4}), (std::vector<int32_t>{4, 5, 6}));  // always exceeds budget
  EXPECT_EQ(keep_top(s, 100).size(), s.size());
  EXPECT_TRUE(keep_top(s, 0).empty());
  EXPECT_THROW((void)keep_top(s, 2, {8}), Error);
}

TEST(kept_per_head, rounds_n_over_ratio_clamped_to_at_least_one_and_at_most_n) {
  EXPECT_EQ(kept_per_head(100, 4), 25u);
  EXPECT_EQ(kept_per_head(10, 3), 3u);
  EXPECT_EQ(kept_per_head(10, 4), 3u);  // 2.5 rounds away from zero
  EXPECT_EQ(kept_per_head(10, 1), 10u);
  EXPECT_EQ(kept_per_head(3, 1000), 1u);
  EXPECT_THROW((void)kept_per_head(10, 0.5), Error);
}

TEST(make_compressor, rejects_an_unknown_name_listing_the_valid_ones) {
  try {
    (void)make_compressor("zip_it");
    FAIL();
  } catch (const Error& e) {
    const std::string m = e.what();
    for (const std::string& n : compressor_names()) EXPECT_NE(m.find(n), std::string::npos) << n;
    EXPECT_NE(m.find("zip_it"), std::string::npos);
  }
  EXPECT_EQ(compressor_names().size(), 10u);
  for (const std::string& n : compressor_names()) EXPECT_EQ(make_compressor(n)->name(), n);
  EXPECT_THROW((void)make_compressor("kivi+snapkv"), Error);     // quantizer first
  EXPECT_THROW((void)make_compressor("snapkv+h2o"), Error);      // two droppers
  EXPECT_THROW((void)make_compressor("snapkv+kivi+kivi"), Error);
}

TEST(composition, streaming_llm_plus_kivi_at_8x_drops_to_one_over_sqrt_8_and_quantizes_at_4_bits) {
  const KvSnapshot kv = snapshot(2, 2, 256, 64);
  const ModelFacts model{};
  auto c = make_compressor("streaming_llm+kivi");
  EXPECT_EQ(c->name(), "streaming_llm+kivi");
  EXPECT_FALSE(c->needs_stats());
  EXPECT_TRUE(make_compressor("snapkv+rotate_kv")->needs_stats());
  const CompressionPlan p = plan_snapshot(*c, kv, {}, model, 8.0);
  const size_t expect = kept_per_head(256, std::sqrt(8.0));  // 91
  for (const auto& layer : p.keep) {
    for (const auto& head : layer) EXPECT_EQ(head.size(), expect);
  }
  EXPECT_NEAR(double(expect), 256 / std::sqrt(8.0), 1.0);
  EXPECT_EQ(p.quant.key_bits, bits_for_ratio(std::sqrt(8.0)));
  EXPECT_EQ(p.quant.key_bits, 4);
  EXPECT_EQ(p.quant.value_bits, 4);
  std::vector<std::string> names;
  for (const CompressorParam& q : c->params()) names.push_back(q.name);
  for (const char* n : {"drop_share", "streaming_llm.sinks", "kivi.key_bits", "kivi.group_size"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
  }
  // quantize() delegates to KIVI at the plan's settings (bits, and the residual /
  // group size the plan chose for the kept rows), reported as kivi.* parameters.
  auto kivi = make_kivi();
  for (const CompressorParam& q : c->params()) {
    if (q.name.rfind("kivi.", 0) == 0) kivi->set_param(q.name.substr(5), q.value);
  }
  EXPECT_EQ(kivi->params()[0].value, 4.0);
  std::vector<float> k1(kv.k.begin(), kv.k.begin() + 91 * 64), v1(kv.v.begin(), kv.v.begin() + 91 * 64);
  std::vector<float> k2 = k1, v2 = v1;
  const std::vector<int32_t> pos = iota_positions(91);
  EXPECT_EQ(c->quantize(0, 0, pos.data(), 91, 64, model, k1.data(), v1.data()),
            kivi->quantize(0, 0, pos.data(), 91, 64, model, k2.data(), v2.data()));
  EXPECT_EQ(k1, k2);
  EXPECT_EQ(v1, v2);
  // drop_share 1: all of the ratio to dropping, the quantizer at its 8-bit end.
  c->set_param("drop_share", 1.0);
  c->set_param("kivi.residual", 0);
  const CompressionPlan p1 = plan_snapshot(*c, kv, {}, model, 8.0);
  EXPECT_EQ(p1.keep[0][0].size(), 32u);
  EXPECT_EQ(p1.quant.key_bits, 8);
  EXPECT_THROW(c->set_param("drop_share", 1.5), Error);
}


}  // namespace
}  // namespace vc
