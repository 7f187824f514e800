// CompressedView: kept rows and positions follow the plan, the codec's stored
// rows and byte counts are what the view holds, and malformed plans are refused
// with the layer and head named.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "kernels/error.hpp"
#include "kvtiers/compressed_tier.hpp"

namespace vc {
namespace {

// A codec that records its calls, stores K rounded to quarters and V negated, and
// charges 3 bytes per value plus 7 per call.
class RecordingCodec : public Compressor {
 public:
  struct Call {
    size_t l, g;
    std::vector<int32_t> positions;
  };
  mutable std::vector<Call> calls;

  std::string_view name() const override { return "recording"; }
  std::string_view summary() const override { return "test codec"; }
  std::vector<CompressorParam> params() const override { return {}; }
  void set_param(const std::string&, double) override {}
  CompressionPlan plan(const CompressorInput&) const override { return {}; }
  size_t quantize(size_t l, size_t g, const int32_t* positions, size_t n, size_t head_dim,
                  const ModelFacts&, float* k, float* v) const override {
    calls.push_back({l, g, std::vector<int32_t>(positions, positions + n)});
    for (size_t i = 0; i < n * head_dim; ++i) {
      k[i] = std::round(k[i] * 4.0f) / 4.0f;
      v[i] = -v[i];
    }
    return 2 * n * head_dim * 3 + 7;
  }
};

KvSnapshot snapshot(size_t layers, size_t heads, size_t n_pos, size_t d) {
  KvSnapshot kv;
  kv.layers = layers;
  kv.kv_heads = heads;
  kv.n_pos = n_pos;
  kv.head_dim = d;
  kv.k.resize(layers * heads * n_pos * d);
  kv.v.resize(kv.k.size());
  for (size_t i = 0; i < kv.k.size(); ++i) {
    kv.k[i] = 0.37f * float(i % 101) - 3.0f;
    kv.v[i] = 0.11f * float(i % 37) + 1.0f;
  }
  return kv;
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no vc::Error)";
}

TEST(compressed_tier, kept_rows_and_positions_follow_the_plan_as_the_codec_stores_them) {
  const KvSnapshot kv = snapshot(2, 2, 10, 4);
  CompressionPlan plan;
  plan.keep = {{{0, 3, 9}, {1, 2}}, {{}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}}};
  plan.quant = QuantSpec{4, 2};
  ModelFacts model;
  model.heads = 4;
  for (int32_t p = 0; p < 10; ++p) model.positions.push_back(100 + 2 * p);
  RecordingCodec codec;
  const CompressedView view = CompressedView::build(kv, plan, codec, model);

  EXPECT_EQ(view.layers(), 2u);
  EXPECT_EQ(view.kv_heads(), 2u);
  EXPECT_EQ(view.head_dim(), 4u);
  EXPECT_EQ(view.covered(), 10u);
  EXPECT_EQ(view.full_bytes(), 10u * 2 * 2 * 4 * 2 * 2);
  EXPECT_EQ(view.quant().key_bits, 4);
  EXPECT_EQ(view.quant().value_bits, 2);
  size_t expect_bytes = 0;
  for (size_t l = 0; l < 2; ++l)
    for (size_t g = 0; g < 2; ++g) {
      const std::vector<int32_t>& keep = plan.keep[l][g];
      ASSERT_EQ(view.count(l, g), keep.size());
      for (size_t i = 0; i < keep.size(); ++i) {
        EXPECT_EQ(view.positions(l, g)[i], keep[i]);
        for (size_t d = 0; d < 4; ++d) {
          const size_t p = size_t(keep[i]);
          EXPECT_EQ(view.k(l, g)[i * 4 + d], std::round(kv.k_at(l, g, p)[d] * 4.0f) / 4.0f);
          EXPECT_EQ(view.v(l, g)[i * 4 + d], -kv.v_at(l, g, p)[d]);
        }
      }
      if (!keep.empty()) expect_bytes += 2 * keep.size() * 4 * 3 + 7;
    }
  EXPECT_EQ(view.stored_bytes(), expect_bytes);
  // The codec saw absolute positions; the empty head was not passed to it.
  ASSERT_EQ(codec.calls.size(), 3u);
  EXPECT_EQ(codec.calls[0].l, 0u);
  EXPECT_EQ(codec.calls[0].g, 0u);
  EXPECT_EQ(codec.calls[0].positions, (std::vector<int32_t>{100, 106, 118}));
  EXPECT_EQ(codec.calls[2].l, 1u);
  EXPECT_EQ(codec.calls[2].g, 1u);
  EXPECT_EQ(codec.calls[2].positions.size(), 10u);
}

TEST(compressed_tier, without_model_positions_the_codec_sees_snapshot_indices) {
  const KvSnapshot kv = snapshot(1, 1, 6, 2);
  CompressionPlan plan;
  plan.keep = {{{2, 5}}};
  RecordingCodec codec;
  const CompressedView view = CompressedView::build(kv, plan, codec, ModelFacts{});
  ASSERT_EQ(codec.calls.size(), 1u);
  EXPECT_EQ(codec.calls[0].positions, (std::vector<int32_t>{2, 5}));
  EXPECT_EQ(view.stored_bytes(), 2u * 2 * 2 * 3 + 7);
}

TEST(compressed_tier, a_malformed_plan_is_refused_naming_the_layer_and_head) {
  const KvSnapshot kv = snapshot(2, 2, 8, 2);
  RecordingCodec codec;
  const ModelFacts model;
  auto build_msg = [&](std::vector<std::vector<std::vector<int32_t>>> keep) {
    CompressionPlan plan;
    plan.keep = std::move(keep);
    return message_of([&] { (void)CompressedView::build(kv, plan, codec, model); });
  };
  std::string msg = build_msg({{{0}, {0}}});
  EXPECT_NE(msg.find("1 layers"), std::string::npos) << msg;
  msg = build_msg({{{0}, {0}}, {{0}}});
  EXPECT_NE(msg.find("layer 1 has 1 KV heads"), std::string::npos) << msg;
  msg = build_msg({{{0}, {0}}, {{8}, {0}}});
  EXPECT_NE(msg.find("layer 1, KV head 0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("position 8"), std::string::npos) << msg;
  msg = build_msg({{{0}, {0}}, {{-1}, {0}}});
  EXPECT_NE(msg.find("layer 1, KV head 0"), std::string::npos) << msg;
  msg = build_msg({{{0}, {3, 2}}, {{0}, {0}}});
  EXPECT_NE(msg.find("layer 0, KV head 1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("not ascending"), std::string::npos) << msg;
  msg = build_msg({{{0}, {0}}, {{0}, {4, 4}}});
  EXPECT_NE(msg.find("layer 1, KV head 1"), std::string::npos) << msg;
  EXPECT_TRUE(codec.calls.empty());  // validation comes before any codec call

  ModelFacts short_positions;
  short_positions.positions = {0, 1, 2};
  CompressionPlan plan;
  plan.keep = {{{0}, {0}}, {{0}, {0}}};
  msg = message_of([&] { (void)CompressedView::build(kv, plan, codec, short_positions); });
  EXPECT_NE(msg.find("model.positions"), std::string::npos) << msg;
}

}  // namespace
}  // namespace vc
