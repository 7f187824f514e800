// The drafter's attention over a quantized compressed view (attention_row_mixed
// with a packed prefix, decoded a block of rows at a time through
// CompressedView::decode_rows) against a double-precision softmax over the view's
// dequantized rows then a paged tail: every quantized format (KIVI, KVQuant with
// its RoPE transform and outliers, RotateKV with its Hadamard transform, the
// StreamingLLM combinations, 16-bit and 3-bit sides), prefix lengths around the
// 16-row block, on every SIMD path the CPU runs; and attending from the codes
// (quant_sides) against decoding every block, bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/attention_mixed.hpp"
#include "kvtiers/compressed_tier.hpp"
#include "kvtiers/layer_compression.hpp"
#include "tests/kernels/kernel_test_util.hpp"
#include "tests/kvtiers/attention_reference.hpp"

namespace vc {
namespace {

constexpr size_t kLayers = 1, kKvHeads = 2, kHeads = 4, kDim = 64, kPos = 300, kBlock = 8;

struct Rows {
  const CompressedView* view;
  size_t l, g;
};

void decode_rows(const void* ctx, size_t r0, size_t r1, float* k, float* v) {
  const auto* r = static_cast<const Rows*>(ctx);
  r->view->decode_rows(r->l, r->g, r0, r1, k, v);
}

using test::normal;

std::vector<double> reference(const float* q, const std::vector<float>& k,
                              const std::vector<float>& v, size_t n, float scale) {
  return test::reference_attention(q, k, v, n, kDim, scale);
}

void check_view(const std::string& what, const CompressedView& view, std::mt19937& rng) {
  const float scale = 1.f / std::sqrt(float(kDim));
  // A tail of fp32 rows at positions [tail_begin, n_ctx) in reversed blocks.
  const size_t tail_begin = kPos, n_ctx = kPos + 5;
  const size_t blocks = (n_ctx + kBlock - 1) / kBlock;
  std::vector<int32_t> table(blocks);
  std::iota(table.rbegin(), table.rend(), 0);
  const std::vector<float> tk = normal(blocks * kKvHeads * kBlock * kDim, rng, 1.f);
  const std::vector<float> tv = normal(tk.size(), rng, 0.5f);
  const cpu::PagedKv tail{tk.data(), tv.data(), DType::f32, kBlock, kKvHeads, kDim, table.data()};
  const std::vector<float> q = normal(kHeads * kDim, rng, 1.f);
  size_t most = kPos;
  for (size_t g = 0; g < kKvHeads; ++g) most = std::min(most, view.count(0, g));
  ASSERT_GT(most, 40u) << what;
  // The first `n` kept rows of each head (decode_rows of a prefix of the view).
  for (size_t n : {size_t(1), size_t(15), size_t(16), size_t(17), size_t(32), size_t(33), most}) {
    std::vector<Rows> ctx;
    for (size_t g = 0; g < kKvHeads; ++g) ctx.push_back({&view, 0, g});
    std::vector<cpu::DenseKvHead> prefix;
    for (size_t g = 0; g < kKvHeads; ++g)
      prefix.push_back({nullptr, nullptr, n, DType::f32, &decode_rows, &ctx[g]});
    for (size_t tail_rows : {size_t(0), size_t(5)}) {
      std::vector<float> out(kHeads * kDim, NAN);
      cpu::attention_row_mixed(q.data(), kHeads, prefix.data(), tail, tail_begin,
                               tail_begin + tail_rows, scale, out.data());
      for (size_t h = 0; h < kHeads; ++h) {
        const size_t g = h / (kHeads / kKvHeads), all = view.count(0, g);
        std::vector<float> k(all * kDim), v(all * kDim);
        view.decode(0, g, k.data(), v.data());
        k.resize(n * kDim);
        v.resize(n * kDim);
        for (size_t pos = tail_begin; pos < tail_begin + tail_rows; ++pos) {
          const size_t at = ((size_t(table[pos / kBlock]) * kKvHeads + g) * kBlock + pos % kBlock) * kDim;
          k.insert(k.end(), tk.begin() + long(at), tk.begin() + long(at + kDim));
          v.insert(v.end(), tv.begin() + long(at), tv.begin() + long(at + kDim));
        }
        const std::vector<double> want = reference(&q[h * kDim], k, v, n + tail_rows, scale);
        for (size_t j = 0; j < kDim; ++j)
          ASSERT_NEAR(out[h * kDim + j], want[j], 2e-5)
              << what << ", head " << h << " dim " << j << ", prefix " << n << " tail " << tail_rows;
      }
    }
  }
}

TEST(packed_attention, every_quantized_view_matches_a_double_softmax_over_its_rows_on_every_simd_path) {
  std::mt19937 rng(11);
  KvSnapshot kv{kLayers, kKvHeads, kDim, kPos, normal(kLayers * kKvHeads * kPos * kDim, rng, 1.f),
                normal(kLayers * kKvHeads * kPos * kDim, rng, 0.5f)};
  for (size_t i = 5; i < kv.k.size(); i += kDim) kv.k[i] *= 8.0f;  // an outlier channel
  ModelFacts model;
  model.heads = kHeads;
  for (size_t i = 0; i < kDim / 2; ++i)
    model.rope_inv_freq.push_back(float(std::pow(10000.0, -2.0 * double(i) / double(kDim))));
  for (size_t p = 0; p < kPos; ++p) model.positions.push_back(int32_t(p) + 1000);
  struct Format {
    const char* name;
    double ratio;
    int key_bits = 0, value_bits = 0;  // 0: the codec's choice
  };
  const Format formats[] = {{"kivi", 4.0},      {"kivi", 8.0},           {"kvquant", 4.0},
                            {"kvquant", 8.0},   {"rotate_kv", 4.0},      {"streaming_llm+kivi", 2.0},
                            {"streaming_llm+kvquant", 2.0}, {"streaming_llm+rotate_kv", 2.0},
                            {"kivi", 4.0, 16, 3},           {"kvquant", 4.0, 16, 3},
                            {"rotate_kv", 4.0, 16, 3}};
  std::vector<std::pair<std::string, CompressedView>> views;
  for (const Format& f : formats) {
    auto c = make_compressor(f.name);
    if (f.key_bits != 0) c->set_param("key_bits", f.key_bits);
    if (f.value_bits != 0) c->set_param("value_bits", f.value_bits);
    const CompressionPlan plan = plan_snapshot(*c, kv, {}, model, f.ratio);
    CompressedView view = CompressedView::build(kv, plan, *c, model);
    for (size_t g = 0; g < kKvHeads; ++g)
      ASSERT_FALSE(view.rows_in_place(0, g)) << f.name << ": its rows should be packed";
    views.emplace_back(std::string(f.name) + " " + std::to_string(f.ratio) + "x k" +
                           std::to_string(f.key_bits) + " v" + std::to_string(f.value_bits),
                       std::move(view));
  }
  test::for_each_simd_path([&](cpu::SimdPath) {
    std::mt19937 r(5);
    for (const auto& [what, view] : views) check_view(what, view, r);
  });
}

// The drafter's attention with the view's quantized sides attended from their codes
// (what forward() passes: CompressedView::quant_sides) against decoding every block
// (the path before), on every SIMD path, for every quantized format. KVQuant's
// sides are read from their codes (its outliers blended in, its pre-RoPE keys
// turned by RoPE inside the kernel) with the same bits; KIVI's too on the scalar
// path, while the vector paths factor its dequantization out of the inner loops
// (factored_attention_kernel.hpp): the same result up to float rounding. RotateKV's
// rotated sides are not through quant_sides() (they are attended in their rotated
// basis instead: view_attention_test).
TEST(packed_attention, attending_from_the_codes_matches_decoding_every_block) {
  std::mt19937 rng(12);
  KvSnapshot kv{kLayers, kKvHeads, kDim, kPos, normal(kLayers * kKvHeads * kPos * kDim, rng, 1.f),
                normal(kLayers * kKvHeads * kPos * kDim, rng, 0.5f)};
  for (size_t i = 5; i < kv.k.size(); i += kDim) kv.k[i] *= 8.0f;  // an outlier channel
  ModelFacts model;
  model.heads = kHeads;
  for (size_t i = 0; i < kDim / 2; ++i)
    model.rope_inv_freq.push_back(float(std::pow(10000.0, -2.0 * double(i) / double(kDim))));
  for (size_t p = 0; p < kPos; ++p) model.positions.push_back(int32_t(p) + 1000);
  struct Format {
    const char* name;
    double ratio;
    int key_bits, value_bits;  // 0: the codec's choice
    bool from_codes;           // both sides read from their codes
    bool factored;             // KIVI's layout: factored on the vector paths
  };
  const Format formats[] = {{"kivi", 4.0, 0, 0, true, true},
                            {"kivi", 8.0, 0, 0, true, true},
                            {"kivi", 4.0, 3, 5, true, true},
                            {"kivi", 4.0, 16, 3, false, false},
                            {"kvquant", 4.0, 0, 0, true, false},
                            {"rotate_kv", 4.0, 0, 0, false, false},
                            {"streaming_llm+kivi", 2.0, 0, 0, true, true}};
  const float scale = 1.f / std::sqrt(float(kDim));
  const std::vector<float> q = normal(kHeads * kDim, rng, 1.f);
  const std::vector<int32_t> table((kPos + 3) / kBlock + 1, 0);  // every tail block: block 0
  const std::vector<float> tk = normal(kKvHeads * kBlock * kDim, rng, 1.f), tv = tk;
  const cpu::PagedKv tail{tk.data(), tv.data(), DType::f32, kBlock, kKvHeads, kDim, table.data()};
  for (const Format& f : formats) {
    auto c = make_compressor(f.name);
    if (f.key_bits != 0) c->set_param("key_bits", f.key_bits);
    if (f.value_bits != 0) c->set_param("value_bits", f.value_bits);
    const CompressedView view =
        CompressedView::build(kv, plan_snapshot(*c, kv, {}, model, f.ratio), *c, model);
    const std::string what = std::string(f.name) + " " + std::to_string(f.ratio) + "x k" +
                             std::to_string(f.key_bits) + " v" + std::to_string(f.value_bits);
    if (std::string(f.name) == "kvquant") {  // what makes it hard: outliers, RoPE'd keys
      const auto sides = view.quant_sides(0, 0);
      ASSERT_TRUE(sides.k && sides.v) << what;
      EXPECT_GT(sides.k->n_outliers, 0u) << what;
      EXPECT_GT(sides.v->n_outliers, 0u) << what;
      EXPECT_NE(sides.k->rope_inv_freq, nullptr) << what;
    }
    std::vector<Rows> ctx;
    std::vector<CompressedView::QuantSides> sides;
    for (size_t g = 0; g < kKvHeads; ++g) {
      ctx.push_back({&view, 0, g});
      sides.push_back(view.quant_sides(0, g));
      EXPECT_EQ(sides[g].k.has_value() && sides[g].v.has_value(), f.from_codes) << what;
    }
    test::for_each_simd_path([&](cpu::SimdPath path) {
      const bool same_bits = !f.factored || path == cpu::SimdPath::scalar;
      for (size_t n : {size_t(16), size_t(47), size_t(130), view.count(0, 0)}) {
        std::vector<cpu::DenseKvHead> decoded, fused;
        for (size_t g = 0; g < kKvHeads; ++g) {
          const size_t rows = std::min(n, view.count(0, g));
          decoded.push_back({nullptr, nullptr, rows, DType::f32, &decode_rows, &ctx[g]});
          fused.push_back(decoded.back());
          fused.back().quant_k = sides[g].k ? &*sides[g].k : nullptr;
          fused.back().quant_v = sides[g].v ? &*sides[g].v : nullptr;
        }
        std::vector<float> want(kHeads * kDim), got(kHeads * kDim);
        cpu::attention_row_mixed(q.data(), kHeads, decoded.data(), tail, kPos, kPos + 3, scale,
                                 want.data());
        cpu::attention_row_mixed(q.data(), kHeads, fused.data(), tail, kPos, kPos + 3, scale,
                                 got.data());
        if (same_bits) {
          ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
              << what << ", prefix " << n;
        } else {
          for (size_t i = 0; i < want.size(); ++i)
            ASSERT_NEAR(got[i], want[i], 2e-6f * (1.f + std::fabs(want[i])))
                << what << ", prefix " << n << ", element " << i;
        }
      }
    });
  }
}

}  // namespace
}  // namespace vc
