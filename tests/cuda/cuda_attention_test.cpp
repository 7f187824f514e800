// The CUDA AttentionBackend (runtime/cuda/cuda_attention.cpp, what `--device cuda`
// runs full-KV attention with): host KV blocks staged per pass, within the kernel's
// tolerance of the CPU's attention_row, bit for bit the same whether a row runs alone
// or among others, whether its blocks come in one add or in chunks (the full tier's
// streaming), and from several threads at once; rows over a paged cache, through the
// backend's device copy of it, get a staged pass's bits and see every new write;
// clear errors for blocks never staged or a pass sized too small. Skipped without a
// device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "kernels/cpu/attention.hpp"
#include "kernels/error.hpp"
#include "kvtiers/paged_kv_cache.hpp"
#include "runtime/attention_backend.hpp"
#include "tests/cuda/cuda_test_support.hpp"

namespace vc {
namespace {

constexpr size_t kBlocks = 40, kKvHeads = 2, kTokens = 16, kHeadDim = 64, kHeads = 6;

// Host KV of one layer, [kBlocks, kKvHeads, kTokens, kHeadDim] bf16, and two
// sequences' block tables over it in a shuffled order.
struct HostKv {
  std::vector<uint8_t> k, v;
  std::vector<int32_t> table_a, table_b;  // 24 and 16 blocks
  explicit HostKv(std::mt19937& rng) {
    const size_t n = kBlocks * kKvHeads * kTokens * kHeadDim;
    k = cuda::test::random_typed(rng, n, DType::bf16, -1.f, 1.f);
    v = cuda::test::random_typed(rng, n, DType::bf16, -1.f, 1.f);
    std::vector<int32_t> order(kBlocks);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    // Sequence a holds a run of consecutive blocks in the middle (one copy).
    table_a.assign(order.begin(), order.begin() + 24);
    std::iota(table_a.begin() + 8, table_a.begin() + 14, int32_t(0));
    table_b.assign(order.begin() + 24, order.end());
    for (int32_t& b : table_b)
      if (b < 6) b = 39 - b;  // keep a's consecutive run 0..5 its own
  }
  [[nodiscard]] cpu::PagedKv view(const std::vector<int32_t>& table) const {
    return cpu::PagedKv{k.data(), v.data(), DType::bf16, kTokens, kKvHeads, kHeadDim, table.data()};
  }
};

size_t blocks_for(int32_t n_ctx) { return (size_t(n_ctx) + kTokens - 1) / kTokens; }

// Rows [0, na) over sequence a, the rest over b, each sequence's blocks in one add.
std::vector<float> run_pass(AttentionBackend& be, const HostKv& kv, const std::vector<float>& q,
                            const std::vector<int32_t>& n_ctx, size_t na) {
  int32_t ma = 0, mb = 0;
  for (size_t m = 0; m < n_ctx.size(); ++m) (m < na ? ma : mb) = std::max(m < na ? ma : mb, n_ctx[m]);
  auto pass = be.begin(kHeads, kv.view(kv.table_a), n_ctx, blocks_for(ma) + blocks_for(mb), 0.125f);
  if (na > 0) pass->add(0, na, kv.view(kv.table_a), 0, blocks_for(ma), nullptr);
  if (na < n_ctx.size()) pass->add(na, n_ctx.size(), kv.view(kv.table_b), 0, blocks_for(mb), nullptr);
  std::vector<float> out(n_ctx.size() * kHeads * kHeadDim);
  pass->run(q.data(), out.data());
  return out;
}

std::vector<float> row_of(const std::vector<float>& a, size_t m) {
  const size_t d = kHeads * kHeadDim;
  return {a.begin() + long(m * d), a.begin() + long((m + 1) * d)};
}

TEST(cuda_attention_backend, a_pass_over_staged_blocks_gives_the_cpu_attention_within_the_kernels_tolerance) {
  VC_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(7);
  const HostKv kv(rng);
  const auto be = make_cuda_attention(0);
  // Three verify rows of a (around a block edge, past the consecutive run), one of b.
  const std::vector<int32_t> n_ctx{319, 320, 321, 77};
  const auto q = cuda::test::random_floats(rng, n_ctx.size() * kHeads * kHeadDim, -1.f, 1.f);
  const auto got = run_pass(*be, kv, q, n_ctx, 3);
  for (size_t m = 0; m < n_ctx.size(); ++m) {
    std::vector<float> ref(kHeads * kHeadDim);
    cpu::attention_row(q.data() + m * kHeads * kHeadDim, kHeads, kv.view(m < 3 ? kv.table_a : kv.table_b),
                       size_t(n_ctx[m]), 0.125f, ref.data());
    for (size_t i = 0; i < ref.size(); ++i)
      ASSERT_NEAR(got[m * ref.size() + i], ref[i], 2e-5 + 2e-5 * std::fabs(ref[i])) << "row " << m << " i " << i;
  }
}

TEST(cuda_attention_backend, a_row_gives_the_same_bits_alone_among_other_rows_and_with_its_blocks_added_in_chunks) {
  VC_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(8);
  const HostKv kv(rng);
  const auto be = make_cuda_attention(0);
  const std::vector<int32_t> n_ctx{300, 301, 302, 200};
  const auto q = cuda::test::random_floats(rng, n_ctx.size() * kHeads * kHeadDim, -1.f, 1.f);
  const auto batch = run_pass(*be, kv, q, n_ctx, 3);
  for (size_t m = 0; m < n_ctx.size(); ++m) {
    const std::vector<float> qm = row_of(q, m);
    const auto alone = run_pass(*be, kv, qm, {n_ctx[m]}, m < 3 ? 1 : 0);
    EXPECT_TRUE(cuda::test::same_bits(alone, row_of(batch, m))) << "row " << m;
  }
  // Sequence a's rows with their blocks in three chunks, as a full tier streams them.
  const std::vector<int32_t> ctx_a(n_ctx.begin(), n_ctx.begin() + 3);
  const size_t blocks = blocks_for(302);
  auto pass = be->begin(kHeads, kv.view(kv.table_a), ctx_a, blocks, 0.125f);
  pass->add(0, 3, kv.view(kv.table_a), 0, 5, nullptr);
  pass->add(0, 3, kv.view(kv.table_a), 5, 12, nullptr);
  pass->add(0, 3, kv.view(kv.table_a), 12, blocks, nullptr);
  std::vector<float> chunked(3 * kHeads * kHeadDim);
  pass->run(q.data(), chunked.data());
  const std::vector<float> first3(batch.begin(), batch.begin() + long(chunked.size()));
  EXPECT_TRUE(cuda::test::same_bits(chunked, first3));
  // The same chunks as a host tier lends them (keep set: copied without waiting,
  // the stream synchronized before the kernel), the keeps dropped once run returns.
  // Pinned, as the host tier's chunks are, so the copies really are asynchronous.
  for (const auto* buf : {&kv.k, &kv.v})
    ASSERT_EQ(cudaHostRegister(const_cast<uint8_t*>(buf->data()), buf->size(), cudaHostRegisterPortable),
              cudaSuccess);
  auto held = std::make_shared<int>(0);
  auto lent = be->begin(kHeads, kv.view(kv.table_a), ctx_a, blocks, 0.125f);
  lent->add(0, 3, kv.view(kv.table_a), 0, 5, held);
  lent->add(0, 3, kv.view(kv.table_a), 5, 12, held);
  lent->add(0, 3, kv.view(kv.table_a), 12, blocks, held);
  EXPECT_EQ(held.use_count(), 4) << "the pass holds a lent chunk's memory until its copies land";
  std::vector<float> async(chunked.size());
  lent->run(q.data(), async.data());
  EXPECT_EQ(held.use_count(), 1);
  EXPECT_TRUE(cuda::test::same_bits(async, first3));
  for (const auto* buf : {&kv.k, &kv.v}) EXPECT_EQ(cudaHostUnregister(const_cast<uint8_t*>(buf->data())), cudaSuccess);
}

TEST(cuda_attention_backend, a_pass_given_its_queries_first_attends_chunk_by_chunk_with_the_bits_of_one_launch) {
  // A verify pass of 5000 positions (more than the ring's 4096): given its queries
  // first, the pass launches each attention chunk as its blocks arrive, reusing the
  // ring's slots, and merges in run(); the bits are those of a pass staged whole,
  // however the blocks come (a streamer's chunks, lent or staged, or all at once).
  VC_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(15);
  constexpr size_t kLong = 320;  // blocks of 16 positions
  const size_t n = kLong * kKvHeads * kTokens * kHeadDim;
  std::vector<uint8_t> k = cuda::test::random_typed(rng, n, DType::bf16, -1.f, 1.f);
  std::vector<uint8_t> v = cuda::test::random_typed(rng, n, DType::bf16, -1.f, 1.f);
  std::vector<int32_t> table(kLong);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin() + 100, table.begin() + 200, rng);  // not all one run
  const cpu::PagedKv kv{k.data(), v.data(), DType::bf16, kTokens, kKvHeads, kHeadDim, table.data()};
  const std::vector<int32_t> n_ctx{4998, 4999, 5000};
  const size_t blocks = blocks_for(5000);
  const auto q = cuda::test::random_floats(rng, n_ctx.size() * kHeads * kHeadDim, -1.f, 1.f);
  const auto be = make_cuda_attention(0);
  auto whole = be->begin(kHeads, kv, n_ctx, blocks, 0.125f);
  whole->add(0, 3, kv, 0, blocks, nullptr);
  std::vector<float> want(n_ctx.size() * kHeads * kHeadDim);
  whole->run(q.data(), want.data());
  std::vector<float> ref(kHeads * kHeadDim);
  cpu::attention_row(q.data() + 2 * ref.size(), kHeads, kv, 5000, 0.125f, ref.data());
  for (size_t i = 0; i < ref.size(); ++i)
    ASSERT_NEAR(want[2 * ref.size() + i], ref[i], 2e-5 + 2e-5 * std::fabs(ref[i])) << i;
  auto chunked = [&](size_t step, std::shared_ptr<const void> keep) {
    auto pass = be->begin(kHeads, kv, n_ctx, blocks, 0.125f);
    pass->queries(q.data());
    for (size_t b = 0; b < blocks; b += step) pass->add(0, 3, kv, b, std::min(blocks, b + step), keep);
    std::vector<float> out(want.size());
    pass->run(q.data(), out.data());
    return out;
  };
  EXPECT_TRUE(cuda::test::same_bits(chunked(64, nullptr), want)) << "a streamer's chunks of 1024 positions";
  EXPECT_TRUE(cuda::test::same_bits(chunked(7, nullptr), want)) << "chunks across attention chunks";
  EXPECT_TRUE(cuda::test::same_bits(chunked(blocks, nullptr), want)) << "every block in one add";
  for (auto* buf : {&k, &v})
    ASSERT_EQ(cudaHostRegister(buf->data(), buf->size(), cudaHostRegisterPortable), cudaSuccess);
  auto held = std::make_shared<int>(0);
  EXPECT_TRUE(cuda::test::same_bits(chunked(64, held), want)) << "lent chunks";
  EXPECT_EQ(held.use_count(), 1);
  for (auto* buf : {&k, &v}) EXPECT_EQ(cudaHostUnregister(buf->data()), cudaSuccess);
  // Blocks far out of order would overwrite a chunk not yet read: an error.
  auto pass = be->begin(kHeads, kv, n_ctx, blocks, 0.125f);
  pass->queries(q.data());
  EXPECT_THROW(pass->add(0, 3, kv, 300, blocks, nullptr), Error);
  auto rows = be->begin(kHeads, kv, n_ctx, blocks, 0.125f);
  rows->queries(q.data());
  EXPECT_THROW(rows->add(0, 1, kv, 0, 4, nullptr), Error) << "a chunked pass takes every row's blocks";
}

TEST(cuda_attention_backend, threads_running_passes_at_once_get_the_bits_of_passes_one_by_one) {
  VC_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(9);
  const HostKv kv(rng);
  const auto be = make_cuda_attention(0);
  std::vector<std::vector<float>> qs, want(4), got(4);
  std::vector<std::vector<int32_t>> ctx(4);
  for (int t = 0; t < 4; ++t) {
    ctx[t] = {int32_t(100 + 50 * t), int32_t(60 + 7 * t)};
    qs.push_back(cuda::test::random_floats(rng, 2 * kHeads * kHeadDim, -1.f, 1.f));
    want[t] = run_pass(*be, kv, qs[t], ctx[t], 1);
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 5; ++i) got[t] = run_pass(*be, kv, qs[t], ctx[t], 1);
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_TRUE(cuda::test::same_bits(want[t], got[t])) << "thread " << t;
}

TEST(cuda_attention_backend, rows_over_a_cache_get_the_bits_of_a_staged_pass_and_see_each_new_write) {
  VC_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(11);
  KvCacheConfig cfg;
  cfg.num_layers = 2, cfg.kv_heads = kKvHeads, cfg.head_dim = kHeadDim, cfg.block_tokens = kTokens;
  cfg.num_blocks = 256;
  PagedKvCache cache(cfg);
  KvSequence seq, other;
  auto write_to = [&](KvSequence& s, size_t from, size_t to) {
    cache.reserve(s, to);
    for (size_t p = from; p < to; ++p)
      for (size_t l = 0; l < 2; ++l) {
        const auto k = cuda::test::random_floats(rng, kKvHeads * kHeadDim, -1.f, 1.f);
        const auto v = cuda::test::random_floats(rng, kKvHeads * kHeadDim, -1.f, 1.f);
        cache.write(l, s, p, k.data(), v.data());
      }
  };
  auto write = [&](size_t from, size_t to) { write_to(seq, from, to); };
  const auto be = make_cuda_attention(0);
  auto compare_on = [&](const KvSequence& s, const std::vector<int32_t>& n_ctx, const char* what) {
    const auto q = cuda::test::random_floats(rng, n_ctx.size() * kHeads * kHeadDim, -1.f, 1.f);
    const std::vector<const KvSequence*> seqs(n_ctx.size(), &s);
    std::vector<float> cached(q.size()), staged(q.size());
    be->attend_cached(cache, 1, kHeads, seqs, n_ctx, 0.125f, q.data(), cached.data());
    const size_t blocks = blocks_for(*std::max_element(n_ctx.begin(), n_ctx.end()));
    auto pass = be->begin(kHeads, cache.view(1, s), n_ctx, blocks, 0.125f);
    pass->add(0, n_ctx.size(), cache.view(1, s), 0, blocks, nullptr);
    pass->run(q.data(), staged.data());
    EXPECT_TRUE(cuda::test::same_bits(cached, staged)) << what;
  };
  auto compare = [&](const std::vector<int32_t>& n_ctx, const char* what) { compare_on(seq, n_ctx, what); };
  write(0, 300);
  compare({298, 299, 300}, "after the prefill");
  write(300, 301);  // a decode step: the newest block changes
  compare({301}, "after a decode step");
  cache.truncate(seq, 290);
  write(290, 296);  // a rollback, then other KV at the same positions
  compare({293, 296}, "after a rollback and rewrite");
  // The copy holds the blocks read so far (it grows with the highest one): another
  // sequence's 150 blocks make it grow, and what it held must come along.
  write_to(other, 0, 150 * kTokens);
  compare_on(other, {int32_t(150 * kTokens)}, "a sequence past the copy's first size");
  compare({296}, "the first sequence again, after the copy grew");
  // Decode steps whose rows the backend stores into its copy itself (wrote: from
  // host rows here, from the device's under DeviceRows): the copy holds the host's
  // bits, and the blocks stay current.
  for (size_t p = 296; p < 300; ++p) {
    cache.reserve(seq, p + 1);
    for (size_t l = 0; l < 2; ++l) {
      const auto k = cuda::test::random_floats(rng, kKvHeads * kHeadDim, -1.f, 1.f);
      const auto v = cuda::test::random_floats(rng, kKvHeads * kHeadDim, -1.f, 1.f);
      cache.write(l, seq, p, k.data(), v.data());
      const std::vector<const KvSequence*> one = {&seq};
      const std::vector<int32_t> at = {int32_t(p)};
      be->wrote(cache, l, one, at, k.data(), v.data());
    }
    compare({int32_t(p) + 1}, "after a decode step stored through the backend");
  }
  // That the blocks stayed current, not copied again: bytes changed on the host
  // behind the cache's back (no write counted) do not reach the copy, so rows over
  // the copy now differ from a pass staged from the host.
  KvSequence none;
  const cpu::PagedKv host = cache.view(1, none);
  const size_t block_bytes = kKvHeads * kTokens * kHeadDim * dtype_size(cfg.dtype);
  auto* newest = static_cast<std::byte*>(const_cast<void*>(host.k)) + size_t(seq.blocks[299 / kTokens]) * block_bytes;
  for (size_t i = 0; i < block_bytes; ++i) newest[i] = std::byte(0x3c);
  const auto q = cuda::test::random_floats(rng, kHeads * kHeadDim, -1.f, 1.f);
  const std::vector<const KvSequence*> one = {&seq};
  const std::vector<int32_t> n_ctx = {300};
  std::vector<float> cached(q.size()), staged(q.size());
  be->attend_cached(cache, 1, kHeads, one, n_ctx, 0.125f, q.data(), cached.data());
  auto pass = be->begin(kHeads, cache.view(1, seq), n_ctx, blocks_for(300), 0.125f);
  pass->add(0, 1, cache.view(1, seq), 0, blocks_for(300), nullptr);
  pass->run(q.data(), staged.data());
  EXPECT_FALSE(cuda::test::same_bits(cached, staged)) << "the copy was refreshed from the host";
}

TEST(cuda_attention_backend, a_row_whose_blocks_were_not_staged_or_a_pass_sized_too_small_is_a_clear_error) {
  VC_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(10);
  const HostKv kv(rng);
  const auto be = make_cuda_attention(0);
  const std::vector<int32_t> n_ctx{100};
  const auto q = cuda::test::random_floats(rng, kHeads * kHeadDim, -1.f, 1.f);
  std::vector<float> out(kHeads * kHeadDim);
  auto pass = be->begin(kHeads, kv.view(kv.table_a), n_ctx, 7, 0.125f);
  pass->add(0, 1, kv.view(kv.table_a), 0, 3, nullptr);  // 7 blocks needed, 3 staged
  try {
    pass->run(q.data(), out.data());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not staged"), std::string::npos) << e.what();
  }
  auto small = be->begin(kHeads, kv.view(kv.table_a), n_ctx, 2, 0.125f);
  try {
    small->add(0, 1, kv.view(kv.table_a), 0, 7, nullptr);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sized for"), std::string::npos) << e.what();
  }
}

TEST(cuda_attention_backend, a_device_past_the_machines_gpus_is_an_error_naming_it) {
  VC_REQUIRE_CUDA_DEVICE();
  try {
    (void)make_cuda_attention(4096);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:4096"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace vc
