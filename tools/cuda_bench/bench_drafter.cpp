// The drafter's attention (compressed prefix rows + paged tail) at the Llama-3.1-8B
// attention shape for one layer: contexts compressed 4x (a quarter of the positions
// kept per KV head, bf16), and quantized 4x (every position as KIVI's 4-bit codes:
// keys per channel in groups of 32 tokens, values per token, fp16 zeros and scales,
// dequantized in the kernel), plus a 64-position tail, for batches of draft rows of
// different requests. The roofline counts the prefix's bytes as held, the tail once
// per row, and the queries and outputs. Each case's data is held in several copies,
// rotated call by call, so that the timed calls read HBM, not L2 (50-60 MB).
#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "kernels/cuda/attention_mixed.cuh"
#include "kernels/cuda/cuda_check.hpp"
#include "tools/cuda_bench/bench.hpp"

namespace vc::cuda::bench {
namespace {

constexpr size_t kHeads = 32, kKvHeads = 8, kHeadDim = 128, kBlockTokens = 16, kTail = 64;
constexpr size_t kRatio = 4;

// Copies of a case's `bytes` so that the rotation covers at least 256 MiB.
size_t copies_for(size_t bytes) {
  return std::clamp<size_t>((size_t(256) << 20) / std::max<size_t>(bytes, 1) + 1, 1, 64);
}

}  // namespace

void bench_drafter(Report& r, bool quick) {
  const std::vector<size_t> contexts =
      quick ? std::vector<size_t>{32768} : std::vector<size_t>{8192, 32768, 131072};
  const std::vector<size_t> row_counts =
      quick ? std::vector<size_t>{1, 16} : std::vector<size_t>{1, 8, 32};
  for (size_t ctx : contexts) {
    const size_t kept = ctx / kRatio, row_bytes = kHeadDim * 2;
    for (size_t M : row_counts) {
      // Every row its own request: kept rows [M * kv_heads][kept, head_dim], tail blocks.
      const size_t prefix_bytes = M * kKvHeads * kept * row_bytes;
      const size_t tail_blocks = kTail / kBlockTokens;
      const size_t tail_bytes = M * tail_blocks * kKvHeads * kBlockTokens * row_bytes;
      const size_t copies = copies_for(2 * (prefix_bytes + tail_bytes));
      DeviceMem pk(copies * prefix_bytes), pv(copies * prefix_bytes), k(copies * tail_bytes),
          v(copies * tail_bytes);
      fill_device(pk.get(), copies * prefix_bytes);
      fill_device(pv.get(), copies * prefix_bytes);
      fill_device(k.get(), copies * tail_bytes);
      fill_device(v.get(), copies * tail_bytes);
      std::vector<const void*> kp, vp;  // [copies][M * kv_heads]
      for (size_t c = 0; c < copies; ++c)
        for (size_t i = 0; i < M * kKvHeads; ++i) {
          kp.push_back(pk.as<char>() + c * prefix_bytes + i * kept * row_bytes);
          vp.push_back(pv.as<char>() + c * prefix_bytes + i * kept * row_bytes);
        }
      // Logical blocks below ctx are never read (the view covers them): map all to 0.
      const size_t stride = (ctx + kTail + kBlockTokens - 1) / kBlockTokens;
      std::vector<int32_t> tables(M * stride, 0), counts(M * kKvHeads, int32_t(kept));
      std::vector<int32_t> begin(M, int32_t(ctx)), n_ctx(M, int32_t(ctx + kTail));
      for (size_t m = 0; m < M; ++m)
        for (size_t b = 0; b < tail_blocks; ++b)
          tables[m * stride + ctx / kBlockTokens + b] = int32_t(m * tail_blocks + b);
      DeviceMem dkp(kp.size() * sizeof(void*)), dvp(vp.size() * sizeof(void*));
      DeviceMem dtables(tables.size() * 4), dcounts(counts.size() * 4), dbegin(M * 4), dctx(M * 4);
      CUDA_CHECK(
          cudaMemcpy(dkp.get(), kp.data(), kp.size() * sizeof(void*), cudaMemcpyHostToDevice));
      CUDA_CHECK(
          cudaMemcpy(dvp.get(), vp.data(), vp.size() * sizeof(void*), cudaMemcpyHostToDevice));
      CUDA_CHECK(
          cudaMemcpy(dtables.get(), tables.data(), tables.size() * 4, cudaMemcpyHostToDevice));
      CUDA_CHECK(
          cudaMemcpy(dcounts.get(), counts.data(), counts.size() * 4, cudaMemcpyHostToDevice));
      CUDA_CHECK(cudaMemcpy(dbegin.get(), begin.data(), M * 4, cudaMemcpyHostToDevice));
      CUDA_CHECK(cudaMemcpy(dctx.get(), n_ctx.data(), M * 4, cudaMemcpyHostToDevice));
      DeviceMem q(M * kHeads * kHeadDim * 4), out(M * kHeads * kHeadDim * 4);
      fill_device(q.get(), M * kHeads * kHeadDim * 4);

      MixedKvRows kv;
      kv.prefix_k = static_cast<const void* const*>(dkp.get());
      kv.prefix_v = static_cast<const void* const*>(dvp.get());
      kv.prefix_count = dcounts.as<int32_t>();
      kv.k = k.get();
      kv.v = v.get();
      kv.dtype = DType::bf16;
      kv.block_tokens = kBlockTokens;
      kv.kv_heads = kKvHeads;
      kv.head_dim = kHeadDim;
      kv.block_tables = dtables.as<int32_t>();
      kv.table_stride = stride;
      kv.tail_begin = dbegin.as<int32_t>();
      kv.n_ctx = dctx.as<int32_t>();
      kv.max_entries = kept + kTail;
      const size_t ws = attention_mixed_workspace_floats(M, kHeads, kHeadDim, kv.max_entries);
      DeviceMem work(ws * 4);
      const size_t heads = M * kKvHeads;
      auto kv_for = [&](size_t c) {  // copy c of the case's data
        MixedKvRows x = kv;
        x.prefix_k = static_cast<const void* const*>(dkp.get()) + c * heads;
        x.prefix_v = static_cast<const void* const*>(dvp.get()) + c * heads;
        x.k = k.as<char>() + c * tail_bytes;
        x.v = v.as<char>() + c * tail_bytes;
        return x;
      };
      auto call = [&](int i) {
        return launch_attention_rows_mixed(q.as<float>(), M, kHeads, kv_for(size_t(i) % copies),
                                           0.08838835f, out.as<float>(), work.as<float>(), ws,
                                           nullptr);
      };
      const double sec = time_calls(call, 2, quick ? 10 : 30);
      const double q_out = 2.0 * double(M * kHeads * kHeadDim * 4);
      const double bytes = 2.0 * double(prefix_bytes + tail_bytes) + q_out;
      r.rows.push_back({"drafter", "ctx " + std::to_string(ctx) + " kept 1/4 + tail 64", M, bytes,
                        sec, bytes / (r.d2d_gbps * 1e9)});

      // The same context held as KIVI-like 4-bit codes: every position, per head its
      // own buffers (so no head reads another's from L2).
      const size_t code_bytes = ctx * kHeadDim / 2;
      const size_t k_params = (ctx + 31) / 32 * kHeadDim, v_params = ctx;  // fp16 each
      const size_t side_bytes = code_bytes + 2 * 2 * std::max(k_params, v_params);
      const size_t qcopies = copies_for(2 * heads * side_bytes + 2 * tail_bytes);
      DeviceMem qbuf(qcopies * 2 * heads * side_bytes);
      fill_device(qbuf.get(), qcopies * 2 * heads * side_bytes);
      std::vector<QuantPrefixSide> qk, qvs;  // [qcopies][M * kv_heads]
      for (size_t i = 0; i < qcopies * heads; ++i) {
        for (int side = 0; side < 2; ++side) {
          const char* base = qbuf.as<char>() + (2 * i + size_t(side)) * side_bytes;
          QuantPrefixSide s;
          s.codes = reinterpret_cast<const uint8_t*>(base);
          s.codes_bytes = code_bytes;
          s.bits = 4;
          s.rows = ctx;
          s.block_rows = side == 0 ? 32 : 1;
          s.block_cols = side == 0 ? 1 : kHeadDim;
          const size_t params = side == 0 ? k_params : v_params;
          s.zero = reinterpret_cast<const uint16_t*>(base + code_bytes);
          s.scale = s.zero + params;
          (side == 0 ? qk : qvs).push_back(s);
        }
      }
      DeviceMem dqk(qk.size() * sizeof(QuantPrefixSide)), dqv(qvs.size() * sizeof(QuantPrefixSide));
      CUDA_CHECK(cudaMemcpy(dqk.get(), qk.data(), qk.size() * sizeof(QuantPrefixSide),
                            cudaMemcpyHostToDevice));
      CUDA_CHECK(cudaMemcpy(dqv.get(), qvs.data(), qvs.size() * sizeof(QuantPrefixSide),
                            cudaMemcpyHostToDevice));
      std::vector<int32_t> all(M * kKvHeads, int32_t(ctx));
      DeviceMem dall(all.size() * 4);
      CUDA_CHECK(cudaMemcpy(dall.get(), all.data(), all.size() * 4, cudaMemcpyHostToDevice));
      MixedKvRows kq = kv;
      kq.prefix_count = dall.as<int32_t>();
      kq.prefix_quant_k = dqk.as<QuantPrefixSide>();
      kq.prefix_quant_v = dqv.as<QuantPrefixSide>();
      kq.max_entries = ctx + kTail;
      const size_t wq = attention_mixed_workspace_floats(M, kHeads, kHeadDim, kq.max_entries);
      DeviceMem qwork(wq * 4);
      auto qcall = [&](int i) {
        MixedKvRows x = kq;
        x.prefix_quant_k = dqk.as<QuantPrefixSide>() + (size_t(i) % qcopies) * heads;
        x.prefix_quant_v = dqv.as<QuantPrefixSide>() + (size_t(i) % qcopies) * heads;
        x.k = k.as<char>() + (size_t(i) % copies) * tail_bytes;
        x.v = v.as<char>() + (size_t(i) % copies) * tail_bytes;
        return launch_attention_rows_mixed(q.as<float>(), M, kHeads, x, 0.08838835f,
                                           out.as<float>(), qwork.as<float>(), wq, nullptr);
      };
      const double qsec = time_calls(qcall, 2, quick ? 10 : 30);
      const double held = double(M * kKvHeads) * 2.0 * double(code_bytes) +
                          double(M * kKvHeads) * 2.0 * 2.0 * double(k_params + v_params);
      const double qbytes = held + 2.0 * double(tail_bytes) + q_out;
      r.rows.push_back({"drafter", "ctx " + std::to_string(ctx) + " KIVI 4-bit codes + tail 64", M,
                        qbytes, qsec, qbytes / (r.d2d_gbps * 1e9)});
    }
  }
}

}  // namespace vc::cuda::bench
