// The batch-invariant matmul at the Llama-3.1-8B shapes (hidden 4096, 32 query and 8
// KV heads of 128, MLP 14336, vocabulary 128256, bf16 weights) for decode (M = 1)
// and verify / batched-draft row counts, against the HBM roofline: the bytes a call
// must read (its weights, x) and write (y) over the device-to-device copy bandwidth.
// Weights rotate through copies worth more than the L2 cache, so every call reads
// them from HBM. Also checks, at these shapes, that a row's bits do not depend on M.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/matmul.cuh"
#include "tools/cuda_bench/bench.hpp"

namespace vc::cuda::bench {
namespace {

struct Shape {
  const char* name;
  size_t K, N;
  int per_step;  // calls per decode step (32 layers; the LM head once)
};

constexpr Shape kShapes[] = {
    {"q_proj 4096x4096", 4096, 4096, 32},      {"k_proj 4096x1024", 4096, 1024, 32},
    {"v_proj 4096x1024", 4096, 1024, 32},      {"o_proj 4096x4096", 4096, 4096, 32},
    {"gate_proj 4096x14336", 4096, 14336, 32}, {"up_proj 4096x14336", 4096, 14336, 32},
    {"down_proj 14336x4096", 14336, 4096, 32}, {"lm_head 4096x128256", 4096, 128256, 1},
};

constexpr size_t kRotateBytes = size_t(256) << 20;  // > 4x the H200's 60 MB L2

double roofline(const Report& r, double bytes) { return bytes / (r.d2d_gbps * 1e9); }

}  // namespace

void bench_gemm(Report& r, bool quick) {
  const std::vector<size_t> row_counts =
      quick ? std::vector<size_t>{1, 32} : std::vector<size_t>{1, 4, 8, 16, 32, 64};
  const size_t max_m = row_counts.back();
  double step_s = 0, step_bytes = 0;
  for (const Shape& s : kShapes) {
    const size_t wbytes = s.N * s.K * 2;
    const size_t copies = std::max<size_t>(1, (kRotateBytes + wbytes - 1) / wbytes);
    DeviceMem w(wbytes * copies), x(max_m * s.K * 4), y(max_m * s.N * 4);
    fill_device(w.get(), wbytes * copies);
    fill_device(x.get(), max_m * s.K * 4);
    for (size_t M : row_counts) {
      auto call = [&](int i) {
        const char* wi = w.as<char>() + (size_t(i) % copies) * wbytes;
        return launch_matmul(x.as<float>(), M, s.K, wi, DType::bf16, s.N, nullptr, y.as<float>(),
                             nullptr);
      };
      const double sec = time_calls(call, 2, quick ? 10 : 30);
      const double bytes = double(wbytes) + double(M * s.K * 4) + double(M * s.N * 4);
      r.rows.push_back({"gemm", s.name, M, bytes, sec, roofline(r, bytes)});
      if (M == 1) {
        step_s += sec * s.per_step;
        step_bytes += bytes * s.per_step;
      }
    }
    // Batch invariance at this shape: row 0 alone and as the first of max_m rows.
    std::vector<float> alone(s.N), batch(s.N);
    CUDA_CHECK(launch_matmul(x.as<float>(), 1, s.K, w.get(), DType::bf16, s.N, nullptr,
                             y.as<float>(), nullptr));
    CUDA_CHECK(cudaMemcpy(alone.data(), y.get(), s.N * 4, cudaMemcpyDeviceToHost));
    CUDA_CHECK(launch_matmul(x.as<float>(), max_m, s.K, w.get(), DType::bf16, s.N, nullptr,
                             y.as<float>(), nullptr));
    CUDA_CHECK(cudaMemcpy(batch.data(), y.get(), s.N * 4, cudaMemcpyDeviceToHost));
    const bool same = std::memcmp(alone.data(), batch.data(), s.N * 4) == 0;
    r.checks.push_back({std::string("gemm batch invariance ") + s.name, same,
                        "row 0 alone vs first of " + std::to_string(max_m) + " rows"});
  }
  r.rows.push_back({"gemm", "decode step GEMMs (32 layers + LM head, M=1)", 1, step_bytes, step_s,
                    roofline(r, step_bytes)});
}

}  // namespace vc::cuda::bench
