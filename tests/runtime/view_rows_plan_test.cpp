// plan_view_rows (runtime/view_rows_plan.hpp): how draft rows over compressed views
// are handed to a device. A token-dropping view's kept rows are listed in place; a
// quantized one (KIVI, KVQuant with its pre-RoPE keys, RotateKV's rotation) as its
// stored sides, which decode to the view's own rows bit for bit with what the plan
// gives (positions, RoPE frequencies); each (view, head) is listed once however
// many rows read it; tails go through their sequences' blocks; forms no device
// reads are left to the CPU, and tails past a sequence's blocks are errors.
#include "runtime/view_rows_plan.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/error.hpp"
#include "kvtiers/compressed_tier.hpp"
#include "kvtiers/layer_compression.hpp"

namespace vc {
namespace {

constexpr size_t kLayers = 2, kHeads = 2, kDim = 64, kPos = 200;

// KV of kPos positions (an outlier channel in K) and RoPE facts whose absolute
// positions start at 1000.
struct Case {
  KvSnapshot kv;
  ModelFacts model;
  Case() {
    std::mt19937 rng(5);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    kv = KvSnapshot{kLayers, kHeads, kDim, kPos, {}, {}};
    kv.k.resize(kLayers * kHeads * kPos * kDim);
    kv.v.resize(kv.k.size());
    for (float& x : kv.k) x = dist(rng);
    for (float& x : kv.v) x = 0.5f * dist(rng);
    for (size_t i = 5; i < kv.k.size(); i += kDim) kv.k[i] *= 8.0f;
    model.heads = kHeads * 4;
    for (size_t i = 0; i < kDim / 2; ++i)
      model.rope_inv_freq.push_back(float(std::pow(10000.0, -2.0 * double(i) / double(kDim))));
    for (size_t p = 0; p < kPos; ++p) model.positions.push_back(int32_t(p) + 1000);
  }
  [[nodiscard]] CompressedView view(const std::string& name, double ratio) const {
    auto c = make_compressor(name);
    return CompressedView::build(kv, plan_snapshot(*c, kv, {}, model, ratio), *c, model);
  }
};

// A cache of the view's shape and a sequence holding `n` positions' blocks.
struct Tail {
  PagedKvCache cache;
  KvSequence seq;
  explicit Tail(size_t n, DType dtype = DType::bf16)
      : cache(KvCacheConfig{kLayers, kHeads, kDim, 16, 64, dtype, false}) {
    cache.reserve(seq, n);
  }
};

TEST(view_rows_plan, a_token_dropping_view_is_listed_in_place_and_each_tail_through_its_blocks) {
  const Case cs;
  const CompressedView view = cs.view("streaming_llm", 4.0);
  Tail t(kPos + 37);
  const std::vector<const CompressedView*> views = {&view, &view};
  const std::vector<const KvSequence*> seqs = {&t.seq, &t.seq};
  const std::vector<int32_t> n_ctx = {int32_t(kPos) + 30, int32_t(kPos) + 37};
  for (size_t l = 0; l < kLayers; ++l) {
    const auto plan = plan_view_rows(t.cache, l, views, seqs, n_ctx);
    ASSERT_TRUE(plan.has_value());
    ASSERT_EQ(plan->prefixes.size(), kHeads) << "each (view, head) once, for both rows";
    for (size_t m = 0; m < 2; ++m)
      for (size_t g = 0; g < kHeads; ++g) {
        const ViewRowsPlan::Prefix& p = plan->prefixes[size_t(plan->prefix_of[m * kHeads + g])];
        EXPECT_FALSE(p.packed());
        EXPECT_EQ(p.rows, view.count(l, g));
        EXPECT_EQ(p.k, view.rows_in_place(l, g)->k);
        EXPECT_EQ(p.v, view.rows_in_place(l, g)->v);
      }
    EXPECT_EQ(plan->tail_begin, (std::vector<int32_t>{int32_t(kPos), int32_t(kPos)}));
    // Blocks 12..14 hold positions [192, 237): both rows' tails.
    ASSERT_EQ(plan->table_stride, 15u);
    for (size_t m = 0; m < 2; ++m)
      for (size_t j = 12; j < 15; ++j) EXPECT_EQ(plan->tables[m * 15 + j], t.seq.blocks[j]);
    EXPECT_EQ(plan->max_entries, view.count(l, 0) + 37);
    EXPECT_EQ(plan->max_rope_position, -1);
  }
  // An f32 cache cannot read bf16 kept rows in place: they go as stored sides.
  Tail f32(kPos + 1, DType::f32);
  const auto plan = plan_view_rows(f32.cache, 0, std::vector<const CompressedView*>{&view},
                                   std::vector<const KvSequence*>{&f32.seq},
                                   std::vector<int32_t>{int32_t(kPos) + 1});
  ASSERT_TRUE(plan.has_value());
  EXPECT_TRUE(plan->prefixes[0].packed());
}

TEST(view_rows_plan, a_quantized_view_is_listed_as_its_stored_sides_which_decode_to_the_views_rows) {
  const Case cs;
  for (const char* name : {"kivi", "kvquant", "rotate_kv", "streaming_llm+kvquant"}) {
    const CompressedView view = cs.view(name, 4.0);
    Tail t(kPos + 5);
    for (size_t l = 0; l < kLayers; ++l) {
      const auto plan = plan_view_rows(t.cache, l, std::vector<const CompressedView*>{&view},
                                       std::vector<const KvSequence*>{&t.seq},
                                       std::vector<int32_t>{int32_t(kPos) + 5});
      ASSERT_TRUE(plan.has_value()) << name;
      bool rope = false;
      for (size_t g = 0; g < kHeads; ++g) {
        const ViewRowsPlan::Prefix& p = plan->prefixes[size_t(plan->prefix_of[g])];
        const size_t n = view.count(l, g);
        ASSERT_TRUE(p.packed()) << name;
        ASSERT_EQ(p.rows, n) << name;
        // What a device decodes from the plan is the view's rows, bit for bit.
        std::vector<float> want_k(n * kDim), want_v(n * kDim), k(n * kDim), v(n * kDim);
        view.decode(l, g, want_k.data(), want_v.data());
        p.k_side->decode(k.data(), n, kDim, p.positions, plan->rope_inv_freq);
        p.v_side->decode(v.data(), n, kDim, p.positions, plan->rope_inv_freq);
        EXPECT_EQ(0, std::memcmp(k.data(), want_k.data(), k.size() * sizeof(float))) << name;
        EXPECT_EQ(0, std::memcmp(v.data(), want_v.data(), v.size() * sizeof(float))) << name;
        if (p.k_side->transform == PackedTransform::rope) {  // RoPE'd at their absolute positions
          for (size_t i = 0; i < n; ++i)
            EXPECT_EQ(p.positions[i], cs.model.positions[size_t(view.positions(l, g)[i])]) << name;
          rope = true;
          EXPECT_GE(plan->max_rope_position, p.positions[n - 1]) << name;
        }
      }
      // KVQuant stores keys before RoPE: the plan carries the table's extent.
      EXPECT_EQ(rope, std::string(name).find("kvquant") != std::string::npos) << name;
      if (!rope) {
        EXPECT_EQ(plan->max_rope_position, -1) << name;
      }
    }
  }
}

TEST(view_rows_plan, an_undescribed_codecs_view_stays_on_the_cpu_and_a_tail_past_its_blocks_is_an_error) {
  // A codec that does not describe its storage leaves fp32 rows: no device reads them.
  class Negating final : public Compressor {
   public:
    std::string_view name() const override { return "negating"; }
    std::string_view summary() const override { return "test codec"; }
    std::vector<CompressorParam> params() const override { return {}; }
    void set_param(const std::string&, double) override {}
    LayerPlan plan_layer(const LayerInput&) const override { return {}; }
    size_t quantize(size_t, size_t, const int32_t*, size_t n, size_t d, const ModelFacts&, float*,
                    float* v, PackedHead* = nullptr) const override {
      for (size_t i = 0; i < n * d; ++i) v[i] = -v[i] * 1.001f;
      return n * d * 8;
    }
  };
  const Case cs;
  CompressionPlan keep;
  keep.keep.assign(kLayers, std::vector<std::vector<int32_t>>(kHeads, {0, 3, 9}));
  keep.quant = QuantSpec{16, 16};
  const CompressedView odd = CompressedView::build(cs.kv, keep, Negating(), cs.model);
  Tail t(kPos + 1);
  const std::vector<const KvSequence*> seqs = {&t.seq};
  const std::vector<int32_t> n_ctx = {int32_t(kPos) + 1};
  EXPECT_FALSE(plan_view_rows(t.cache, 0, std::vector<const CompressedView*>{&odd}, seqs, n_ctx).has_value());

  const CompressedView view = cs.view("streaming_llm", 4.0);
  const std::vector<const CompressedView*> views = {&view};
  const std::vector<int32_t> past = {int32_t(kPos) + 20};  // the sequence holds kPos + 1
  EXPECT_THROW((void)plan_view_rows(t.cache, 0, views, seqs, past), Error);
  const std::vector<int32_t> short_ctx = {int32_t(kPos) - 1};  // fewer than the view covers
  EXPECT_THROW((void)plan_view_rows(t.cache, 0, views, seqs, short_ctx), Error);
}

}  // namespace
}  // namespace vc
