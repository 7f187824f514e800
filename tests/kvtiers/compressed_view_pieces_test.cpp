// Cutting a compressed view into chunks of positions and joining the chunks back:
// the joined view holds and decodes bit for bit what the whole one does, for token
// dropping (bf16 rows) and quantization (packed codes, scales, residual rows); a
// cut inside a quantization block, a piece that does not follow, and damaged bytes
// are refused with their reason.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kvtiers/compressed_tier.hpp"
#include "kvtiers/compressor.hpp"
#include "kvtiers/layer_compression.hpp"

namespace vc {
namespace {

struct Case {
  KvSnapshot kv;
  ModelFacts model;
  Case(size_t layers, size_t heads, size_t n, size_t d, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist;
    kv = KvSnapshot{layers, heads, d, n, {}, {}};
    kv.k.resize(layers * heads * n * d);
    kv.v.resize(kv.k.size());
    for (float& x : kv.k) x = dist(rng);
    for (float& x : kv.v) x = 0.5f * dist(rng);
    model.heads = heads * 4;
    for (size_t i = 0; i < d / 2; ++i)
      model.rope_inv_freq.push_back(float(std::pow(10000.0, -2.0 * double(i) / double(d))));
    for (size_t p = 0; p < n; ++p) model.positions.push_back(int32_t(p));
  }
};

std::span<const std::byte> bytes_of(const std::string& s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

// Every head of `a` and `b` keeps the same positions and decodes to the same bits.
void expect_same_view(const CompressedView& a, const CompressedView& b, const std::string& what) {
  ASSERT_EQ(a.covered(), b.covered()) << what;
  const size_t d = a.head_dim();
  for (size_t l = 0; l < a.layers(); ++l)
    for (size_t g = 0; g < a.kv_heads(); ++g) {
      const size_t n = a.count(l, g);
      ASSERT_EQ(n, b.count(l, g)) << what << " layer " << l << " head " << g;
      EXPECT_EQ(std::memcmp(a.positions(l, g), b.positions(l, g), n * sizeof(int32_t)), 0) << what;
      std::vector<float> ka(n * d), va(n * d), kb(n * d), vb(n * d);
      a.decode(l, g, ka.data(), va.data());
      b.decode(l, g, kb.data(), vb.data());
      EXPECT_EQ(std::memcmp(ka.data(), kb.data(), ka.size() * 4), 0) << what << " K layer " << l << " head " << g;
      EXPECT_EQ(std::memcmp(va.data(), vb.data(), va.size() * 4), 0) << what << " V layer " << l << " head " << g;
      EXPECT_EQ(a.rows_in_place(l, g).has_value(), b.rows_in_place(l, g).has_value()) << what;
    }
}

// Cuts `view` into chunks of `chunk` positions, sends each through serialize /
// deserialize, and joins them; nullopt (with `why`) when a chunk cannot be cut.
std::optional<CompressedView> round_trip(const CompressedView& view, size_t chunk, std::string& why) {
  std::optional<CompressedView> joined;
  for (size_t p = 0; p + chunk <= view.covered(); p += chunk) {
    const std::optional<CompressedView> piece = view.slice(p, p + chunk, why);
    if (!piece) return std::nullopt;
    const std::string bytes = piece->serialize();
    std::optional<CompressedView> back = CompressedView::deserialize(bytes_of(bytes), why);
    EXPECT_TRUE(back.has_value()) << why;
    if (!back) return std::nullopt;
    EXPECT_EQ(back->serialize(), bytes);
    if (!joined) joined = std::move(back);
    else if (!joined->append(*back, why)) return std::nullopt;
  }
  return joined;
}

TEST(compressed_view_pieces, chunks_joined_back_decode_bit_for_bit_as_the_whole_view) {
  // 5 chunks of 64 positions + 21 more (KIVI's residual rows land in the tail).
  const Case cs(2, 2, 5 * 64 + 21, 64, 7);
  for (const char* name : {"streaming_llm", "kivi", "streaming_llm+kivi", "rotate_kv", "kvquant"}) {
    for (double ratio : {2.0, 4.0}) {
      auto c = make_compressor(name);
      if (std::string(name) == "kivi") c->set_param("group_size", 32);
      if (std::string(name) == "streaming_llm+kivi") c->set_param("kivi.group_size", 32);
      const CompressedView whole =
          CompressedView::build(cs.kv, plan_snapshot(*c, cs.kv, {}, cs.model, ratio), *c, cs.model);
      std::string why;
      const std::optional<CompressedView> joined = round_trip(whole, 64, why);
      const std::string what = std::string(name) + " at " + std::to_string(ratio) + "x";
      if (std::string(name) == "streaming_llm" || std::string(name) == "kivi") {
        ASSERT_TRUE(joined.has_value()) << what << ": " << why;  // these two always cut at 64
      } else if (!joined) {
        EXPECT_FALSE(why.empty()) << what;  // refused, and says why
        continue;
      }
      std::string cut_why;
      const std::optional<CompressedView> prefix = whole.slice(0, 5 * 64, cut_why);
      ASSERT_TRUE(prefix.has_value()) << what << ": " << cut_why;
      expect_same_view(*joined, *prefix, what);
      // Cutting, the bytes and joining keep heads' shared position lists shared.
      EXPECT_EQ(joined->held_bytes(), prefix->held_bytes()) << what;
      EXPECT_EQ(joined->serialize(), prefix->serialize()) << what;
      // The prefix's rows are the whole view's first rows, bit for bit.
      for (size_t l = 0; l < 2; ++l)
        for (size_t g = 0; g < 2; ++g) {
          const size_t n = joined->count(l, g), d = 64;
          std::vector<float> kj(n * d), vj(n * d), kw(whole.count(l, g) * d), vw(kw.size());
          joined->decode(l, g, kj.data(), vj.data());
          whole.decode(l, g, kw.data(), vw.data());
          EXPECT_EQ(std::memcmp(kj.data(), kw.data(), kj.size() * 4), 0) << what;
          EXPECT_EQ(std::memcmp(vj.data(), vw.data(), vj.size() * 4), 0) << what;
        }
    }
  }
}

TEST(compressed_view_pieces, a_cut_inside_a_quantization_block_is_refused_with_its_reason) {
  const Case cs(1, 2, 200, 64, 3);
  auto c = make_compressor("kivi");
  c->set_param("group_size", 32);
  c->set_param("residual", 0);
  const CompressedView whole =
      CompressedView::build(cs.kv, plan_snapshot(*c, cs.kv, {}, cs.model, 4.0), *c, cs.model);
  std::string why;
  EXPECT_FALSE(whole.slice(0, 48, why).has_value());
  EXPECT_NE(why.find("quantization block of 32 rows straddles row 48"), std::string::npos) << why;
  EXPECT_TRUE(whole.slice(32, 64, why).has_value()) << why;
  EXPECT_FALSE(whole.slice(0, 201, why).has_value());
  EXPECT_NE(why.find("outside the view's [0, 200)"), std::string::npos) << why;
}

TEST(compressed_view_pieces, a_piece_that_does_not_follow_or_differs_in_precision_is_refused) {
  const Case cs(1, 2, 128, 64, 5);
  auto drop = make_compressor("streaming_llm");
  auto quant = make_compressor("kivi");
  quant->set_param("group_size", 32);
  const CompressedView a =
      CompressedView::build(cs.kv, plan_snapshot(*drop, cs.kv, {}, cs.model, 2.0), *drop, cs.model);
  const CompressedView q =
      CompressedView::build(cs.kv, plan_snapshot(*quant, cs.kv, {}, cs.model, 4.0), *quant, cs.model);
  std::string why;
  CompressedView first = *a.slice(0, 64, why);
  const CompressedView same_again = *a.slice(0, 64, why);
  EXPECT_FALSE(first.append(same_again, why));
  EXPECT_NE(why.find("starting at position 0, the view ends at 64"), std::string::npos) << why;
  EXPECT_FALSE(first.append(*q.slice(64, 128, why), why));
  EXPECT_NE(why.find("another precision"), std::string::npos) << why;
  EXPECT_EQ(first.covered(), 64u);  // unchanged by the refusals
  EXPECT_TRUE(first.append(*a.slice(64, 128, why), why)) << why;
  EXPECT_EQ(first.covered(), 128u);
}

TEST(compressed_view_pieces, a_views_id_names_its_contents_and_its_lifetime_ends_with_them) {
  // A device keeps a copy of a view's kept rows under its id (CompressedView::id):
  // a copy or a change must not answer to the old id, a move carries it over.
  const Case cs(1, 2, 128, 64, 5);
  auto drop = make_compressor("streaming_llm");
  const CompressedView a =
      CompressedView::build(cs.kv, plan_snapshot(*drop, cs.kv, {}, cs.model, 2.0), *drop, cs.model);
  EXPECT_NE(a.id(), 0u);
  const CompressedView copy = a;
  EXPECT_NE(copy.id(), a.id());
  std::string why;
  CompressedView first = *a.slice(0, 64, why);
  const uint64_t before = first.id();
  const std::weak_ptr<const void> alive = first.lifetime();
  CompressedView moved = std::move(first);
  EXPECT_EQ(moved.id(), before);
  EXPECT_EQ(first.id(), 0u);  // NOLINT(bugprone-use-after-move): what a moved-from view answers
  EXPECT_FALSE(alive.expired());
  EXPECT_FALSE(moved.append(*a.slice(0, 64, why), why));  // refused: unchanged, same id
  EXPECT_EQ(moved.id(), before);
  ASSERT_TRUE(moved.append(*a.slice(64, 128, why), why)) << why;
  EXPECT_NE(moved.id(), before);
  EXPECT_TRUE(alive.expired()) << "a copy of the rows before the append must be dropped";
  const std::weak_ptr<const void> now = moved.lifetime();
  { const CompressedView gone = std::move(moved); }
  EXPECT_TRUE(now.expired());
}

TEST(compressed_view_pieces, damaged_bytes_are_refused_instead_of_read) {
  const Case cs(1, 2, 128, 64, 9);
  auto c = make_compressor("kivi");
  c->set_param("group_size", 32);
  const CompressedView whole =
      CompressedView::build(cs.kv, plan_snapshot(*c, cs.kv, {}, cs.model, 4.0), *c, cs.model);
  std::string why;
  const std::string bytes = whole.slice(0, 64, why)->serialize();
  // Cut short anywhere: refused.
  for (size_t cut : {size_t(0), size_t(3), size_t(40), bytes.size() / 2, bytes.size() - 1}) {
    why.clear();
    EXPECT_FALSE(CompressedView::deserialize(bytes_of(bytes.substr(0, cut)), why).has_value()) << cut;
    EXPECT_FALSE(why.empty()) << cut;
  }
  // One byte too many, and another format.
  EXPECT_FALSE(CompressedView::deserialize(bytes_of(bytes + "x"), why).has_value());
  EXPECT_NE(why.find("trailing bytes"), std::string::npos) << why;
  std::string other = bytes;
  other[0] = 2;
  EXPECT_FALSE(CompressedView::deserialize(bytes_of(other), why).has_value());
  EXPECT_NE(why.find("another format"), std::string::npos) << why;
}

}  // namespace
}  // namespace vc
