// A verify pass as the mover feeds it: the CUDA attention backend's pass
// (runtime/cuda/cuda_pass.cpp) over one layer's full KV at the Llama-3.1-8B shape
// (8 KV heads of 128, bf16, 16-position blocks, 32 query heads), 16 rows (a draft of
// 15 and its next token), the KV in pinned host memory lent chunk by chunk (1024
// positions, as the host tier lends its chunks). Its "roofline" is the pinned
// host-to-device copy of the same bytes (the "copy" group's rate): the CUDA issue's
// mover target is 90% of it. Both ways of running the pass are timed: given its
// queries first (chunks attended as they arrive, copies overlapping the kernel) and
// staged whole (every block copied, then one launch).
#include <algorithm>
#include <chrono>
#include <memory>
#include <numeric>
#include <vector>

#include "kernels/cpu/attention.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/error.hpp"
#include "runtime/attention_backend.hpp"
#include "tools/cuda_bench/bench.hpp"

namespace vc::cuda::bench {

void bench_verify(Report& r, bool quick) {
  double h2d_bps = 0;  // the pinned host-to-device rate bench_copies measured
  for (const Row& row : r.rows)
    if (row.group == "copy" && row.name == "pinned host to device") h2d_bps = row.bytes / row.seconds;
  if (h2d_bps <= 0) throw Error("the pinned host-to-device copy was not measured");
  constexpr size_t kKv = 8, kDim = 128, kHeads = 32, kTokens = 16, kRows = 16, kChunk = 1024;
  const auto be = make_cuda_attention(0);
  for (const size_t ctx : quick ? std::vector<size_t>{8192} : std::vector<size_t>{8192, 32768}) {
    const size_t blocks = ctx / kTokens, block_bytes = kKv * kTokens * kDim * 2, bytes = blocks * block_bytes;
    void* hk = nullptr;
    void* hv = nullptr;
    CUDA_CHECK(cudaHostAlloc(&hk, bytes, cudaHostAllocDefault));
    CUDA_CHECK(cudaHostAlloc(&hv, bytes, cudaHostAllocDefault));
    std::fill_n(static_cast<uint16_t*>(hk), bytes / 2, uint16_t(0x3c3c));
    std::fill_n(static_cast<uint16_t*>(hv), bytes / 2, uint16_t(0x3c3c));
    std::vector<int32_t> table(blocks);
    std::iota(table.begin(), table.end(), 0);
    const cpu::PagedKv kv{hk, hv, DType::bf16, kTokens, kKv, kDim, table.data()};
    std::vector<int32_t> n_ctx(kRows);
    for (size_t m = 0; m < kRows; ++m) n_ctx[m] = int32_t(ctx - kRows + m + 1);
    std::vector<float> q(kRows * kHeads * kDim, 0.01f), out(q.size());
    const auto keep = std::make_shared<int>(0);  // lent: the memory stays put
    for (const bool chunked : {true, false}) {
      auto once = [&] {
        auto pass = be->begin(kHeads, kv, n_ctx, blocks, 0.088f);
        if (chunked) pass->queries(q.data());
        for (size_t b = 0; b < blocks; b += kChunk / kTokens)
          pass->add(0, kRows, kv, b, std::min(blocks, b + kChunk / kTokens), keep);
        pass->run(q.data(), out.data());
      };
      once();  // warm-up: buffers grown, cuBLAS-free kernels loaded
      std::vector<double> s;
      for (int i = 0; i < (quick ? 3 : 7); ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        once();
        s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      std::sort(s.begin(), s.end());
      Row row{"verify",
              std::string(chunked ? "pass, chunks as they come, " : "pass, staged whole, ") + std::to_string(ctx / 1024) +
                  "K positions, 8B layer (% = of pinned H2D)",
              kRows, 2.0 * double(bytes), s[s.size() / 2], 2.0 * double(bytes) / h2d_bps};
      r.rows.push_back(row);
    }
    CUDA_CHECK(cudaFreeHost(hk));
    CUDA_CHECK(cudaFreeHost(hv));
  }
}

}  // namespace vc::cuda::bench
