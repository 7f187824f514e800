// CompressedView: kept rows and positions follow the plan, the codec's stored
// rows and byte counts are what the view holds, the view holds them packed (bf16
// for droppers, codes and scales for quantizers) and decodes them bit for bit to
// what the codec's quantize() writes, and malformed plans are refused with the
// layer and head named.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/dtype.hpp"
#include "kernels/error.hpp"
#include "kvtiers/compressed_tier.hpp"
#include "kvtiers/layer_compression.hpp"
#include "tests/kvtiers/view_position_bytes.hpp"

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
  LayerPlan plan_layer(const LayerInput&) const override { return {}; }
  size_t quantize(size_t l, size_t g, const int32_t* positions, size_t n, size_t head_dim,
                  const ModelFacts&, float* k, float* v,
                  PackedHead* /*packed*/ = nullptr) const override {
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
      std::vector<float> k(keep.size() * 4), v(keep.size() * 4);
      view.decode(l, g, k.data(), v.data());
      for (size_t i = 0; i < keep.size(); ++i) {
        EXPECT_EQ(view.positions(l, g)[i], keep[i]);
        for (size_t d = 0; d < 4; ++d) {
          const size_t p = size_t(keep[i]);
          EXPECT_EQ(k[i * 4 + d], std::round(kv.k_at(l, g, p)[d] * 4.0f) / 4.0f);
          EXPECT_EQ(v[i * 4 + d], -kv.v_at(l, g, p)[d]);
        }
      }
      if (!keep.empty()) expect_bytes += 2 * keep.size() * 4 * 3 + 7;
    }
  EXPECT_EQ(view.stored_bytes(), expect_bytes);
  // It does not describe its storage: its K (quarters) is bf16-exact, held as bf16;
  // its V is not, held as fp32 rows. Plus the 15 kept positions.
  EXPECT_EQ(view.held_bytes(), 15u * 4 + 15u * 4 * 2 + 15u * 4 * 4);
  // The codec saw absolute positions; the empty head was not passed to it.
  ASSERT_EQ(codec.calls.size(), 3u);
  EXPECT_EQ(codec.calls[0].l, 0u);
  EXPECT_EQ(codec.calls[0].g, 0u);
  EXPECT_EQ(codec.calls[0].positions, (std::vector<int32_t>{100, 106, 118}));
  EXPECT_EQ(codec.calls[2].l, 1u);
  EXPECT_EQ(codec.calls[2].g, 1u);
  EXPECT_EQ(codec.calls[2].positions.size(), 10u);
}

TEST(compressed_tier, heads_keeping_the_same_rows_share_one_position_list_held_once) {
  const KvSnapshot kv = snapshot(2, 2, 10, 4);
  CompressionPlan plan;
  const std::vector<int32_t> all = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  plan.keep = {{all, all}, {all, {1, 2}}};
  plan.quant = QuantSpec{4, 2};
  ModelFacts model;
  model.heads = 4;
  RecordingCodec codec;
  const CompressedView view = CompressedView::build(kv, plan, codec, model);
  EXPECT_EQ(view.positions(0, 1), view.positions(0, 0));
  EXPECT_EQ(view.positions(1, 0), view.positions(0, 0)) << "across layers too";
  EXPECT_NE(view.positions(1, 1), view.positions(0, 0));
  EXPECT_EQ(view.positions(1, 1)[1], 2);
  // 32 kept rows (K bf16: 8 bytes, V fp32: 16 bytes each) and two lists: 10 + 2
  // positions, not 32.
  EXPECT_EQ(view.held_bytes(), 32u * (8 + 16) + 12u * 4);
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

std::vector<float> normal(size_t n, uint32_t seed, float sd = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sd);
  std::vector<float> x(n);
  for (float& e : x) e = dist(rng);
  return x;
}

// Random KV with an outlier channel and RoPE facts whose absolute positions start
// at `offset`.
struct Case {
  KvSnapshot kv;
  ModelFacts model;
  Case(size_t layers, size_t heads, size_t n, size_t d, uint32_t seed, int32_t offset) {
    kv = KvSnapshot{layers, heads, d, n, normal(layers * heads * n * d, seed),
                    normal(layers * heads * n * d, seed + 1, 0.5f)};
    for (size_t i = 5; i < kv.k.size(); i += d) kv.k[i] *= 8.0f;
    model.heads = heads * 4;
    for (size_t i = 0; i < d / 2; ++i)
      model.rope_inv_freq.push_back(float(std::pow(10000.0, -2.0 * double(i) / double(d))));
    for (size_t p = 0; p < n; ++p) model.positions.push_back(int32_t(p) + offset);
  }
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Builds the view of `c`'s plan at `ratio` and checks, head by head, that decode()
// gives back bit for bit what c.quantize() writes for the same kept rows. Returns
// the view.
CompressedView build_and_check_decode(const Compressor& c, const Case& cs, double ratio) {
  const CompressionPlan plan = plan_snapshot(c, cs.kv, {}, cs.model, ratio);
  const CompressedView view = CompressedView::build(cs.kv, plan, c, cs.model);
  const size_t d = cs.kv.head_dim;
  for (size_t l = 0; l < cs.kv.layers; ++l) {
    for (size_t g = 0; g < cs.kv.kv_heads; ++g) {
      const size_t n = view.count(l, g);
      std::vector<float> k(n * d), v(n * d), dk(n * d), dv(n * d);
      std::vector<int32_t> abs(n);
      for (size_t i = 0; i < n; ++i) {
        const size_t p = size_t(view.positions(l, g)[i]);
        std::copy_n(cs.kv.k_at(l, g, p), d, &k[i * d]);
        std::copy_n(cs.kv.v_at(l, g, p), d, &v[i * d]);
        abs[i] = cs.model.positions[p];
      }
      if (n > 0) (void)c.quantize(l, g, abs.data(), n, d, cs.model, k.data(), v.data());
      view.decode(l, g, dk.data(), dv.data());
      EXPECT_TRUE(same_bits(dk, k)) << c.name() << " " << ratio << "x, K of layer " << l << " head " << g;
      EXPECT_TRUE(same_bits(dv, v)) << c.name() << " " << ratio << "x, V of layer " << l << " head " << g;
      // decode_rows: the same bits for any row range (16-row blocks as the drafter
      // reads them, and ranges that start and end inside a quantization block).
      for (size_t step : {size_t(16), size_t(7)}) {
        std::vector<float> rk(n * d, NAN), rv(n * d, NAN);
        for (size_t r0 = 0; r0 < n; r0 += step)
          view.decode_rows(l, g, r0, std::min(n, r0 + step), &rk[r0 * d], &rv[r0 * d]);
        EXPECT_TRUE(same_bits(rk, k)) << c.name() << " " << ratio << "x, rows of " << step << ", K of layer " << l << " head " << g;
        EXPECT_TRUE(same_bits(rv, v)) << c.name() << " " << ratio << "x, rows of " << step << ", V of layer " << l << " head " << g;
      }
    }
  }
  return view;
}

TEST(compressed_tier, every_quantizer_decodes_bit_for_bit_to_what_its_quantize_writes) {
  // Absolute positions differ from snapshot indices (KVQuant re-applies RoPE).
  for (size_t n : {size_t(40), size_t(257)}) {
    const Case cs(2, 2, n, 64, uint32_t(3 + n), 1000);
    for (const char* name : {"kivi", "kvquant", "rotate_kv", "streaming_llm+kivi",
                             "streaming_llm+kvquant", "streaming_llm+rotate_kv"}) {
      auto c = make_compressor(name);
      for (double ratio : {2.0, 4.0, 8.0, 16.0}) (void)build_and_check_decode(*c, cs, ratio);
    }
  }
  // 16-bit sides (bf16, KVQuant's keys pre-RoPE) and KIVI's residual rows.
  const Case cs(1, 2, 100, 64, 9, 7);
  for (const char* name : {"kivi", "kvquant", "rotate_kv"}) {
    auto c = make_compressor(name);
    c->set_param("key_bits", 16);
    c->set_param("value_bits", 3);
    (void)build_and_check_decode(*c, cs, 4.0);
  }
}

TEST(compressed_tier, quantized_views_hold_about_the_bytes_their_codec_stores) {
  const Case cs(2, 2, 901, 128, 11, 0);
  for (const char* name : {"kivi", "kvquant", "rotate_kv", "streaming_llm+kivi"}) {
    auto c = make_compressor(name);
    for (double ratio : {4.0, 8.0}) {
      const CompressedView view = build_and_check_decode(*c, cs, ratio);
      const double held = double(view.held_bytes()), stored = double(view.stored_bytes());
      EXPECT_GE(held, stored) << name << " " << ratio << "x";
      EXPECT_LE(held, 1.10 * stored + 1024) << name << " " << ratio << "x";
    }
  }
}

TEST(compressed_tier, a_dropping_plan_is_held_as_bf16_with_two_bytes_per_element_plus_positions) {
  const Case cs(2, 2, 300, 64, 13, 5);
  for (const char* name : {"streaming_llm", "snapkv", "h2o"}) {
    auto c = make_compressor(name);
    const CompressionPlan plan = [&] {
      if (!c->needs_stats()) return plan_snapshot(*c, cs.kv, {}, cs.model, 4.0);
      // A plan of every third position, as a dropper would keep.
      CompressionPlan p;
      p.keep.assign(2, std::vector<std::vector<int32_t>>(2));
      for (auto& layer : p.keep)
        for (auto& head : layer)
          for (int32_t q = 0; q < 300; q += 3) head.push_back(q);
      return p;
    }();
    const CompressedView view = CompressedView::build(cs.kv, plan, *c, cs.model);
    size_t kept = 0;
    for (size_t l = 0; l < 2; ++l) {
      for (size_t g = 0; g < 2; ++g) {
        const size_t n = view.count(l, g);
        kept += n;
        std::vector<float> k(n * 64), v(n * 64);
        view.decode(l, g, k.data(), v.data());
        for (size_t i = 0; i < n; ++i) {
          const size_t p = size_t(view.positions(l, g)[i]);
          for (size_t j = 0; j < 64; ++j) {
            EXPECT_EQ(k[i * 64 + j], bf16_to_f32(f32_to_bf16(cs.kv.k_at(l, g, p)[j]))) << name;
            EXPECT_EQ(v[i * 64 + j], bf16_to_f32(f32_to_bf16(cs.kv.v_at(l, g, p)[j]))) << name;
          }
        }
      }
    }
    EXPECT_GT(kept, 0u);
    EXPECT_EQ(view.stored_bytes(), kept * 64 * 2 * 2) << name;
    EXPECT_EQ(view.held_bytes(), kept * 64 * 2 * 2 + test::view_position_bytes(view)) << name;
  }
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
