// Tests of the CUDA paged attention for decode and verify rows: against
// vc::cpu::attention_row over the same paged KV (awkward context lengths around
// block and chunk edges, odd head counts, GQA groups, every KV type, scattered block
// tables), and bit for bit against itself across batches -- a row alone equals the
// same row among 1..N others (verify rows of one sequence, rows of other
// sequences). Skipped where no CUDA device is usable.
#include "kernels/cpu/attention.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/attention.cuh"
#include "tests/cuda/cuda_test_support.hpp"

namespace vc::cuda {
namespace {

using test::DeviceBuffer;

// A paged KV layer on the host and the device, blocks handed out in a shuffled order.
struct KvLayer {
  size_t blocks, kv_heads, block_tokens, head_dim;
  DType dtype;
  std::vector<uint8_t> k, v;
  std::vector<int32_t> order;  // a permutation of the physical blocks

  KvLayer(std::mt19937& rng, size_t blocks_, size_t kvh, size_t bt, size_t hd, DType dt)
      : blocks(blocks_), kv_heads(kvh), block_tokens(bt), head_dim(hd), dtype(dt), order(blocks_) {
    const size_t n = blocks * kvh * bt * hd;
    k = test::random_typed(rng, n, dt, -1.f, 1.f);
    v = test::random_typed(rng, n, dt, -1.f, 1.f);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
  }
  [[nodiscard]] cpu::PagedKv cpu_view(const int32_t* table) const {
    return cpu::PagedKv{k.data(), v.data(), dtype, block_tokens, kv_heads, head_dim, table};
  }
};

struct Rows {
  std::vector<int32_t> tables;  // [M, stride]
  std::vector<int32_t> n_ctx;   // [M]
  size_t stride;
};

// Runs the GPU kernel for `rows` (q: [M, n_heads, head_dim]) and returns out.
std::vector<float> gpu_attention(const KvLayer& kv, const DeviceBuffer<uint8_t>& dk,
                                 const DeviceBuffer<uint8_t>& dv, const std::vector<float>& q,
                                 size_t n_heads, const Rows& rows, float scale) {
  const size_t M = rows.n_ctx.size();
  DeviceBuffer<float> dq(q), dout(M * n_heads * kv.head_dim);
  DeviceBuffer<int32_t> dtab(rows.tables), dctx(rows.n_ctx);
  const size_t max_ctx = size_t(*std::max_element(rows.n_ctx.begin(), rows.n_ctx.end()));
  const size_t ws = attention_workspace_floats(M, n_heads, kv.head_dim, kv.block_tokens, max_ctx);
  DeviceBuffer<float> dws(std::max<size_t>(ws, 1));
  PagedKvRows p;
  p.k = dk.get();
  p.v = dv.get();
  p.dtype = kv.dtype;
  p.block_tokens = kv.block_tokens;
  p.kv_heads = kv.kv_heads;
  p.head_dim = kv.head_dim;
  p.block_tables = dtab.get();
  p.table_stride = rows.stride;
  p.n_ctx = dctx.get();
  p.max_ctx = max_ctx;
  CUDA_CHECK(
      launch_attention_rows(dq.get(), M, n_heads, p, scale, dout.get(), dws.get(), ws, nullptr));
  CUDA_CHECK(cudaDeviceSynchronize());
  return dout.download();
}

struct Shape {
  size_t n_heads, kv_heads, head_dim, block_tokens;
  DType dtype;
  std::string str() const {
    return "n_heads=" + std::to_string(n_heads) + " kv_heads=" + std::to_string(kv_heads) +
           " head_dim=" + std::to_string(head_dim) +
           " block_tokens=" + std::to_string(block_tokens) +
           " dtype=" + std::string(dtype_name(dtype));
  }
};

TEST(cuda_attention, matches_the_cpu_attention_row_at_block_and_chunk_edges) {
  VC_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(91);
  for (const Shape& s : {Shape{8, 2, 128, 16, DType::bf16}, Shape{3, 3, 64, 16, DType::bf16},
                         Shape{7, 1, 80, 7, DType::f16}, Shape{4, 4, 96, 32, DType::f32},
                         Shape{16, 2, 256, 16, DType::bf16}}) {
    const size_t chunk = attention_chunk_positions(s.block_tokens);
    std::vector<size_t> lengths = {
        1,     s.block_tokens - 1, s.block_tokens, s.block_tokens + 1, chunk - 1,
        chunk, chunk + 1,          1000,           3 * chunk + 5};
    lengths.erase(std::remove(lengths.begin(), lengths.end(), size_t(0)), lengths.end());
    const size_t max_ctx = *std::max_element(lengths.begin(), lengths.end());
    const size_t stride = (max_ctx + s.block_tokens - 1) / s.block_tokens;
    const KvLayer kv(rng, stride + 3, s.kv_heads, s.block_tokens, s.head_dim, s.dtype);
    DeviceBuffer<uint8_t> dk(kv.k), dv(kv.v);
    const float scale = float(1.0 / std::sqrt(double(s.head_dim)));

    Rows rows{{}, {}, stride};
    for (size_t n : lengths) {
      rows.tables.insert(rows.tables.end(), kv.order.begin(), kv.order.begin() + long(stride));
      rows.n_ctx.push_back(int32_t(n));
    }
    const size_t M = lengths.size(), qd = s.n_heads * s.head_dim;
    const auto q = test::random_floats(rng, M * qd, -1.f, 1.f);
    const auto got = gpu_attention(kv, dk, dv, q, s.n_heads, rows, scale);
    for (size_t m = 0; m < M; ++m) {
      std::vector<float> ref(qd);
      cpu::attention_row(q.data() + m * qd, s.n_heads, kv.cpu_view(kv.order.data()), lengths[m],
                         scale, ref.data());
      // Outputs are averages of V in [-1, 1]; scores and exps round differently
      // (chunking, reduction order), a few 1e-7 each.
      for (size_t i = 0; i < qd; ++i)
        ASSERT_NEAR(got[m * qd + i], ref[i], 2e-5 + 2e-5 * std::fabs(ref[i]))
            << s.str() << " n_ctx=" << lengths[m] << " i=" << i;
    }
  }
}

TEST(cuda_attention, gives_a_verify_row_the_same_bits_alone_and_in_blocks_of_1_to_33_rows) {
  VC_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(92);
  const Shape s{32, 8, 128, 16, DType::bf16};
  const size_t base = 700, max_rows = 33, qd = s.n_heads * s.head_dim;
  const size_t stride = (base + max_rows + s.block_tokens - 1) / s.block_tokens;
  const KvLayer kv(rng, stride, s.kv_heads, s.block_tokens, s.head_dim, s.dtype);
  DeviceBuffer<uint8_t> dk(kv.k), dv(kv.v);
  const auto q = test::random_floats(rng, max_rows * qd, -2.f, 2.f);
  const float scale = 0.0883883f;
  auto table = [&](size_t M) {
    Rows r{{}, {}, stride};
    for (size_t i = 0; i < M; ++i) {
      r.tables.insert(r.tables.end(), kv.order.begin(), kv.order.end());
      r.n_ctx.push_back(int32_t(base + i + 1));  // row i sits at position base + i
    }
    return r;
  };
  std::vector<std::vector<float>> alone(max_rows);
  for (size_t i = 0; i < max_rows; ++i) {
    Rows r{std::vector<int32_t>(kv.order.begin(), kv.order.end()), {int32_t(base + i + 1)}, stride};
    alone[i] =
        gpu_attention(kv, dk, dv, std::vector<float>(q.begin() + i * qd, q.begin() + (i + 1) * qd),
                      s.n_heads, r, scale);
  }
  for (size_t M = 1; M <= max_rows; ++M) {
    const auto got = gpu_attention(kv, dk, dv, std::vector<float>(q.begin(), q.begin() + M * qd),
                                   s.n_heads, table(M), scale);
    for (size_t i = 0; i < M; ++i)
      ASSERT_TRUE(test::same_bits(
          std::vector<float>(got.begin() + i * qd, got.begin() + (i + 1) * qd), alone[i]))
          << "M=" << M << " row " << i;
  }
}

TEST(cuda_attention, gives_a_row_the_same_bits_among_rows_of_other_sequences) {
  VC_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(93);
  const Shape s{8, 2, 64, 16, DType::bf16};
  const size_t qd = s.n_heads * s.head_dim, stride = 40;
  const KvLayer kv(rng, 3 * stride, s.kv_heads, s.block_tokens, s.head_dim, s.dtype);
  DeviceBuffer<uint8_t> dk(kv.k), dv(kv.v);
  const std::vector<int32_t> ctx = {37, 640, 1, 255, 256, 257};
  const auto q = test::random_floats(rng, ctx.size() * qd, -1.f, 1.f);
  Rows all{{}, ctx, stride};
  for (size_t i = 0; i < ctx.size(); ++i) {  // each row its own sequence (blocks)
    for (size_t j = 0; j < stride; ++j)
      all.tables.push_back(kv.order[(i * 17 + j) % kv.order.size()]);
  }
  const auto batch = gpu_attention(kv, dk, dv, q, s.n_heads, all, 0.125f);
  for (size_t i = 0; i < ctx.size(); ++i) {
    Rows one{std::vector<int32_t>(all.tables.begin() + long(i * stride),
                                  all.tables.begin() + long((i + 1) * stride)),
             {ctx[i]},
             stride};
    const auto got =
        gpu_attention(kv, dk, dv, std::vector<float>(q.begin() + i * qd, q.begin() + (i + 1) * qd),
                      s.n_heads, one, 0.125f);
    EXPECT_TRUE(test::same_bits(
        got, std::vector<float>(batch.begin() + i * qd, batch.begin() + (i + 1) * qd)))
        << "row " << i << " n_ctx=" << ctx[i];
  }
}

TEST(cuda_attention, writes_zeros_for_an_empty_context_and_rejects_shapes_it_cannot_run) {
  VC_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(94);
  const KvLayer kv(rng, 2, 1, 16, 64, DType::bf16);
  DeviceBuffer<uint8_t> dk(kv.k), dv(kv.v);
  Rows r{{0, 1}, {0}, 2};
  const auto got =
      gpu_attention(kv, dk, dv, test::random_floats(rng, 2 * 64, -1.f, 1.f), 2, r, 1.f);
  EXPECT_TRUE(std::all_of(got.begin(), got.end(), [](float x) { return x == 0.f; }));

  PagedKvRows bad;
  bad.kv_heads = 3;
  bad.head_dim = 64;
  bad.block_tokens = 16;
  EXPECT_EQ(launch_attention_rows(nullptr, 1, 4, bad, 1.f, nullptr, nullptr, 0, nullptr),
            cudaErrorInvalidValue);  // 4 heads over 3 KV heads
  bad.kv_heads = 1;
  bad.head_dim = 63;
  EXPECT_EQ(launch_attention_rows(nullptr, 1, 4, bad, 1.f, nullptr, nullptr, 0, nullptr),
            cudaErrorInvalidValue);  // odd head_dim
  bad.head_dim = kAttentionMaxHeadDim + 2;
  EXPECT_EQ(launch_attention_rows(nullptr, 1, 4, bad, 1.f, nullptr, nullptr, 0, nullptr),
            cudaErrorInvalidValue);  // head_dim above the kernel's maximum
}

}  // namespace
}  // namespace vc::cuda
