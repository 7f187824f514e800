// Paged attention at the Llama-3.1-8B attention shape (32 query heads, 8 KV heads of
// 128, bf16 KV in blocks of 16 positions) for one layer: decode (one row) and verify
// blocks (rows at consecutive positions of one sequence) at several contexts. The
// roofline counts each KV byte once (rows of one sequence share it) over the
// device-to-device copy bandwidth. Also checks that a verify row's bits are the same
// alone and in its block.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/cuda_check.hpp"
#include "tools/cuda_bench/bench.hpp"

namespace vc::cuda::bench {
namespace {

constexpr size_t kHeads = 32, kKvHeads = 8, kHeadDim = 128, kBlockTokens = 16;
constexpr size_t kRotateBytes = size_t(256) << 20;

struct Pass {
  std::vector<int32_t> tables, n_ctx;
  size_t stride = 0, max_ctx = 0;
};

// M rows at positions ctx - M .. ctx - 1 of one sequence whose blocks are scattered.
Pass verify_pass(size_t ctx, size_t M, const std::vector<int32_t>& order) {
  Pass p;
  p.stride = (ctx + kBlockTokens - 1) / kBlockTokens;
  p.max_ctx = ctx;
  for (size_t i = 0; i < M; ++i) {
    p.tables.insert(p.tables.end(), order.begin(), order.begin() + long(p.stride));
    p.n_ctx.push_back(int32_t(ctx - M + i + 1));
  }
  return p;
}

}  // namespace

void bench_attention(Report& r, bool quick) {
  const std::vector<size_t> contexts =
      quick ? std::vector<size_t>{8192, 32768} : std::vector<size_t>{1024, 8192, 32768, 131072};
  const std::vector<size_t> row_counts =
      quick ? std::vector<size_t>{1, 16} : std::vector<size_t>{1, 8, 16, 32};
  std::mt19937 rng(7);
  for (size_t ctx : contexts) {
    const size_t blocks = (ctx + kBlockTokens - 1) / kBlockTokens;
    const size_t block_bytes = kKvHeads * kBlockTokens * kHeadDim * 2;
    const size_t kv_bytes = blocks * block_bytes;  // K (or V) of one copy
    const size_t copies = std::max<size_t>(1, (kRotateBytes + 2 * kv_bytes - 1) / (2 * kv_bytes));
    DeviceMem k(kv_bytes * copies), v(kv_bytes * copies);
    fill_device(k.get(), kv_bytes * copies);
    fill_device(v.get(), kv_bytes * copies);
    std::vector<int32_t> order(blocks);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);

    for (size_t M : row_counts) {
      const Pass p = verify_pass(ctx, M, order);
      DeviceMem q(M * kHeads * kHeadDim * 4), out(M * kHeads * kHeadDim * 4);
      DeviceMem tables(p.tables.size() * 4), n_ctx(M * 4);
      fill_device(q.get(), M * kHeads * kHeadDim * 4);
      CUDA_CHECK(
          cudaMemcpy(tables.get(), p.tables.data(), p.tables.size() * 4, cudaMemcpyHostToDevice));
      CUDA_CHECK(cudaMemcpy(n_ctx.get(), p.n_ctx.data(), M * 4, cudaMemcpyHostToDevice));
      const size_t ws = attention_workspace_floats(M, kHeads, kHeadDim, kBlockTokens, p.max_ctx);
      DeviceMem work(ws * 4);
      auto kv_for = [&](size_t copy) {
        PagedKvRows kv;
        kv.k = k.as<char>() + copy * kv_bytes;
        kv.v = v.as<char>() + copy * kv_bytes;
        kv.dtype = DType::bf16;
        kv.block_tokens = kBlockTokens;
        kv.kv_heads = kKvHeads;
        kv.head_dim = kHeadDim;
        kv.block_tables = tables.as<int32_t>();
        kv.table_stride = p.stride;
        kv.n_ctx = n_ctx.as<int32_t>();
        kv.max_ctx = p.max_ctx;
        return kv;
      };
      const float scale = 0.08838835f;
      auto call = [&](int i) {
        return launch_attention_rows(q.as<float>(), M, kHeads, kv_for(size_t(i) % copies), scale,
                                     out.as<float>(), work.as<float>(), ws, nullptr);
      };
      const double sec = time_calls(call, 2, quick ? 10 : 30);
      // K + V read once, the queries read and the outputs written (f32).
      const double bytes = 2.0 * double(ctx) * kKvHeads * kHeadDim * 2 + 2.0 * double(M * kHeads * kHeadDim * 4);
      const std::string name = "ctx " + std::to_string(ctx) + (M == 1 ? " decode" : " verify");
      r.rows.push_back({"attention", name, M, bytes, sec, bytes / (r.d2d_gbps * 1e9)});

      if (M > 1) {  // the last row alone must give the bits it gets in the block
        const size_t qd = kHeads * kHeadDim;
        std::vector<float> in_block(qd), alone(qd);
        CUDA_CHECK(call(0));
        CUDA_CHECK(cudaMemcpy(in_block.data(), out.as<float>() + (M - 1) * qd, qd * 4,
                              cudaMemcpyDeviceToHost));
        PagedKvRows one = kv_for(0);
        one.block_tables = tables.as<int32_t>() + (M - 1) * p.stride;
        one.n_ctx = n_ctx.as<int32_t>() + (M - 1);
        CUDA_CHECK(launch_attention_rows(q.as<float>() + (M - 1) * qd, 1, kHeads, one, scale,
                                         out.as<float>(), work.as<float>(), ws, nullptr));
        CUDA_CHECK(cudaMemcpy(alone.data(), out.get(), qd * 4, cudaMemcpyDeviceToHost));
        r.checks.push_back({"attention batch invariance " + name + " M=" + std::to_string(M),
                            std::memcmp(alone.data(), in_block.data(), qd * 4) == 0,
                            "last row alone vs in its block"});
      }
    }
  }
}

}  // namespace vc::cuda::bench
