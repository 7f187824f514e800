// Batch invariance of the decode path: a token's logits and KV are bit-identical
// whether it is computed alone or as one of M rows in a pass, whatever the other
// rows are. The exactness contract (DESIGN.md) rests on this.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>

#include "kernels/cpu/cpu_features.hpp"
#include "runtime/forward.hpp"
#include "tests/runtime/test_support.hpp"

namespace vc {
namespace {

struct Fixture {
  std::shared_ptr<const Model> model = test::tinycode();
  PagedKvCache cache;
  std::vector<KvSequence> seqs;
  std::vector<int32_t> next;  // the token each sequence feeds next

  // Prefix sharing off: with it, sequences whose random prompts share a prefix would
  // share its blocks, and the KV check would compare a block with itself.
  static KvCacheConfig unshared(KvCacheConfig c) {
    c.prefix_sharing = false;
    return c;
  }

  Fixture(DType kv, size_t n_seqs, std::mt19937& rng)
      : cache(unshared(model->kv_config(n_seqs * 160, kv))) {
    Workspace ws(1);
    const ModelConfig& c = model->config();
    std::uniform_int_distribution<size_t> len(1, 90);
    seqs.resize(n_seqs);
    for (auto& s : seqs) {
      const auto ids = test::random_tokens(rng, len(rng), c.vocab_size, c.bos_token_id);
      (void)prefill(*model, ids, s, cache, ws);
      next.push_back(test::random_tokens(rng, 2, c.vocab_size, -1)[1]);
    }
  }

  // One decode row for sequence i at its next position.
  ForwardRow row(size_t i) {
    cache.reserve(seqs[i], seqs[i].length + 1);
    return ForwardRow{next[i], int32_t(seqs[i].length), &seqs[i], true};
  }

  // Raw K and V of sequence i at pos in every layer, as fp32 bits.
  std::vector<float> kv_of(size_t i, size_t pos) {
    const size_t n = model->config().num_kv_heads * size_t(model->config().head_dim);
    std::vector<float> out(2 * n * size_t(model->config().num_layers));
    for (size_t l = 0; l < size_t(model->config().num_layers); ++l)
      cache.read(l, seqs[i], pos, out.data() + 2 * l * n, out.data() + (2 * l + 1) * n);
    return out;
  }
};

bool same_bits(const float* a, const float* b, size_t n) {
  return std::memcmp(a, b, n * sizeof(float)) == 0;
}

void check_batch_invariance(DType kv, int threads) {
  std::mt19937 rng(42);
  constexpr size_t kMaxM = 64;
  Fixture f(kv, kMaxM + 1, rng);
  const size_t vocab = size_t(f.model->config().vocab_size);
  Workspace ws(threads);

  for (size_t M = 1; M <= kMaxM; ++M) {
    // Sequence 0 alone.
    const size_t target = 0, pos = f.seqs[target].length;
    std::vector<float> alone;
    std::vector<ForwardRow> rows{f.row(target)};
    forward(*f.model, rows, f.cache, ws, alone);
    const auto kv_alone = f.kv_of(target, pos);
    f.cache.truncate(f.seqs[target], pos);

    // Sequence 0 among M-1 random other sequences, at a random row.
    std::vector<size_t> members(kMaxM);
    std::iota(members.begin(), members.end(), 1);
    std::shuffle(members.begin(), members.end(), rng);
    members.resize(M - 1);
    const size_t at = std::uniform_int_distribution<size_t>(0, M - 1)(rng);
    members.insert(members.begin() + ptrdiff_t(at), target);
    std::vector<size_t> lengths;
    rows.clear();
    for (size_t i : members) {
      lengths.push_back(f.seqs[i].length);
      rows.push_back(f.row(i));
    }
    std::vector<float> batched;
    forward(*f.model, rows, f.cache, ws, batched);
    ASSERT_TRUE(same_bits(alone.data(), batched.data() + at * vocab, vocab))
        << "logits differ for M=" << M << " row " << at << " threads=" << threads;
    ASSERT_EQ(kv_alone, f.kv_of(target, pos)) << "KV differs for M=" << M;
    for (size_t j = 0; j < members.size(); ++j) f.cache.truncate(f.seqs[members[j]], lengths[j]);
  }
}

TEST(batch_invariance, decode_logits_and_kv_are_bit_identical_for_m_from_1_to_64_bf16_kv) {
  // Every SIMD path this CPU can run (each is deterministic on its own).
  const cpu::SimdPath active = cpu::active_simd_path();
  for (auto p : cpu::kAllSimdPaths) {
    if (!cpu::simd_path_supported(p)) {
      std::printf("  skipping SIMD path %s: not supported by this CPU\n",
                  std::string(cpu::simd_path_name(p)).c_str());
      continue;
    }
    cpu::set_simd_path(p);
    SCOPED_TRACE(std::string(cpu::simd_path_name(p)));
    check_batch_invariance(DType::bf16, 1);
  }
  cpu::set_simd_path(active);
}

TEST(batch_invariance, decode_logits_and_kv_are_bit_identical_with_two_threads_and_f32_kv) {
  check_batch_invariance(DType::f32, 2);
}

TEST(batch_invariance, rows_of_one_sequence_in_one_pass_equal_the_rows_decoded_one_by_one) {
  // This is the verify pass: L+1 positions of one request in one pass must give the
  // logits and KV that step-by-step decoding gives.
  std::mt19937 rng(7);
  const auto model = test::tinycode();
  const ModelConfig& c = model->config();
  PagedKvCache cache(model->kv_config(512, DType::bf16));
  Workspace ws(2);
  const auto prompt = test::random_tokens(rng, 77, c.vocab_size, c.bos_token_id);
  const auto cont = test::random_tokens(rng, 31, c.vocab_size, -1);

  KvSequence a;
  (void)prefill(*model, prompt, a, cache, ws);
  std::vector<float> step_logits, lg;
  for (int32_t t : cont) {
    cache.reserve(a, a.length + 1);
    std::vector<ForwardRow> r{{t, int32_t(a.length), &a, true}};
    forward(*model, r, cache, ws, lg);
    step_logits.insert(step_logits.end(), lg.begin(), lg.end());
  }

  KvSequence b;
  (void)prefill(*model, prompt, b, cache, ws);
  cache.reserve(b, b.length + cont.size());
  std::vector<ForwardRow> rows;
  for (size_t i = 0; i < cont.size(); ++i)
    rows.push_back({cont[i], int32_t(prompt.size() + i), &b, true});
  forward(*model, rows, cache, ws, lg);
  ASSERT_EQ(lg.size(), step_logits.size());
  EXPECT_TRUE(same_bits(lg.data(), step_logits.data(), lg.size()));

  const size_t n = size_t(c.num_kv_heads * c.head_dim);
  std::vector<float> ka(n), va(n), kb(n), vb(n);
  for (size_t l = 0; l < size_t(c.num_layers); ++l)
    for (size_t p = 0; p < a.length; ++p) {
      cache.read(l, a, p, ka.data(), va.data());
      cache.read(l, b, p, kb.data(), vb.data());
      ASSERT_EQ(ka, kb) << "K differs at layer " << l << " position " << p;
      ASSERT_EQ(va, vb) << "V differs at layer " << l << " position " << p;
    }
}

TEST(batch_invariance, runs_of_one_sequences_rows_over_several_kv_tiles_equal_rows_decoded_alone) {
  // A pass whose rows of one sequence go tile by tile over its KV (a prefill chunk,
  // a verify pass), beside rows of other sequences attended one by one: every row's
  // logits are those of decoding it alone. Contexts span several tiles (512
  // positions of this model's bf16 KV, 256 of f32).
  for (DType kv : {DType::bf16, DType::f32}) {
    SCOPED_TRACE(std::string(dtype_name(kv)));
    std::mt19937 rng(11);
    const auto model = test::tinycode();
    const ModelConfig& c = model->config();
    KvCacheConfig cc = model->kv_config(4096, kv);
    cc.prefix_sharing = false;
    PagedKvCache cache(cc);
    Workspace ws(2);
    std::vector<KvSequence> seqs(4);
    std::vector<size_t> lengths;
    for (size_t len : {size_t(1100), size_t(40), size_t(700), size_t(600)}) {
      const auto ids = test::random_tokens(rng, len, c.vocab_size, c.bos_token_id);
      (void)prefill(*model, ids, seqs[lengths.size()], cache, ws);
      lengths.push_back(len);
    }
    // The pass: A A A A A B C C C D; B and D, runs of one row, are attended alone.
    const std::vector<size_t> who{0, 0, 0, 0, 0, 1, 2, 2, 2, 3};
    const auto tokens = test::random_tokens(rng, who.size() + 1, c.vocab_size, -1);
    std::vector<ForwardRow> rows;
    std::vector<size_t> next = lengths;
    for (size_t i = 0; i < who.size(); ++i) {
      KvSequence& s = seqs[who[i]];
      cache.reserve(s, next[who[i]] + 1);
      rows.push_back({tokens[i + 1], int32_t(next[who[i]]++), &s, true});
    }
    std::vector<float> batched;
    forward(*model, rows, cache, ws, batched);
    for (size_t i = 0; i < seqs.size(); ++i) cache.truncate(seqs[i], lengths[i]);

    // The same rows, one pass each, in order.
    const size_t vocab = size_t(c.vocab_size);
    std::vector<float> lg;
    for (size_t i = 0; i < rows.size(); ++i) {
      cache.reserve(*rows[i].seq, size_t(rows[i].position) + 1);
      std::vector<ForwardRow> one{rows[i]};
      forward(*model, one, cache, ws, lg);
      ASSERT_TRUE(same_bits(lg.data(), batched.data() + i * vocab, vocab))
          << "row " << i << " (sequence " << who[i] << ", position " << rows[i].position << ")";
    }
  }
}

TEST(batch_invariance, prefill_chunk_size_does_not_change_a_single_bit) {
  std::mt19937 rng(9);
  const auto model = test::tinycode();
  const ModelConfig& c = model->config();
  PagedKvCache cache(model->kv_config(1024, DType::bf16));
  Workspace ws(2);
  const auto prompt = test::random_tokens(rng, 203, c.vocab_size, c.bos_token_id);
  std::vector<float> ref;
  for (size_t chunk : {size_t(256), size_t(1), size_t(7), size_t(64)}) {
    KvSequence s;
    const auto lg = prefill(*model, prompt, s, cache, ws, chunk);
    cache.free(s);
    if (ref.empty()) ref = lg;
    else EXPECT_TRUE(same_bits(ref.data(), lg.data(), ref.size())) << "chunk " << chunk;
  }
}

}  // namespace
}  // namespace vc
