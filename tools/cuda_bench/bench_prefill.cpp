// Prompt rows (prefill chunks) at the Llama-3.1-8B shapes: one 256-row tile through
// cuBLASLt with the algorithm the CUDA backend pins (runtime/cuda/prompt_gemm.hpp)
// against the same rows through the decode-shaped matmul kernel, in TFLOP/s (the
// "GB/s" column holds GFLOP/s for this group; no roofline). Also checks, at these
// shapes, the pinning's claim: a row's bits do not depend on its place in the tile.
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/matmul.cuh"
#include "kernels/dtype.hpp"
#include "kernels/error.hpp"
#include "runtime/cuda/prompt_gemm.hpp"
#include "tools/cuda_bench/bench.hpp"

namespace vc::cuda::bench {
namespace {

using cuda_backend::kPromptTileRows;
using cuda_backend::kPromptWorkspaceBytes;

struct Shape {
  const char* name;
  size_t K, N;
};

constexpr Shape kShapes[] = {{"q_proj 4096x4096", 4096, 4096},
                             {"gate_proj 4096x14336", 4096, 14336},
                             {"down_proj 14336x4096", 14336, 4096}};

cudaError_t as_cuda(cublasStatus_t s) { return s == CUBLAS_STATUS_SUCCESS ? cudaSuccess : cudaErrorUnknown; }

}  // namespace

void bench_prefill(Report& r, bool quick) {
  std::string why;
  const cuda_backend::CublasLt* lib = cuda_backend::cublaslt(&why);
  if (lib == nullptr) throw Error("cuBLASLt: " + why);
  cublasLtHandle_t handle = nullptr;
  if (lib->create(&handle) != CUBLAS_STATUS_SUCCESS) throw Error("cublasLtCreate failed");
  struct HandleGuard {
    const cuda_backend::CublasLt* lib;
    cublasLtHandle_t h;
    ~HandleGuard() { lib->destroy(h); }
  } guard{lib, handle};
  cuda_backend::PromptGemm gemm;
  const size_t T = kPromptTileRows;
  DeviceMem ws(kPromptWorkspaceBytes);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (const Shape& s : kShapes) {
    DeviceMem w(s.N * s.K * 2), xb(T * s.K * 2), xf(T * s.K * 4), y(T * s.N * 4);
    fill_device(w.get(), s.N * s.K * 2);
    std::vector<float> xh(T * s.K);
    for (float& v : xh) v = bf16_to_f32(f32_to_bf16(u(rng)));
    std::vector<uint16_t> xbh(xh.size());
    for (size_t i = 0; i < xh.size(); ++i) xbh[i] = f32_to_bf16(xh[i]);
    CUDA_CHECK(cudaMemcpy(xf.get(), xh.data(), xh.size() * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(xb.get(), xbh.data(), xbh.size() * 2, cudaMemcpyHostToDevice));
    const cuda_backend::PromptPlan& plan = gemm.plan(*lib, handle, w.get(), s.N, s.K, nullptr, "cuda:0");
    const double flops = 2.0 * double(T) * double(s.N) * double(s.K);
    const int reps = quick ? 5 : 20;
    const double kernel_s = time_calls(
        [&](int) { return launch_matmul(xf.as<float>(), T, s.K, w.get(), DType::bf16, s.N, nullptr, y.as<float>(), nullptr); },
        1, quick ? 2 : 5);
    r.rows.push_back({"prefill", std::string("matmul kernel ") + s.name, T, flops, kernel_s, 0});
    if (!plan.usable) {
      r.checks.push_back({std::string("prefill cuBLASLt algorithm without reduction ") + s.name, false,
                          "none offered: prompt rows of this shape take the matmul kernel"});
      continue;
    }
    const double lt_s = time_calls(
        [&](int) {
          return as_cuda(cuda_backend::PromptGemm::run(handle, plan, w.get(), xb.get(), y.as<float>(), ws.get(), nullptr));
        },
        2, reps);
    r.rows.push_back({"prefill", std::string("cuBLASLt (pinned) ") + s.name, T, flops, lt_s, 0});

    // Row 0 of the tile moved to row 17 (the rows before it zero): the same bits.
    std::vector<float> first(s.N), moved(s.N);
    CUDA_CHECK(as_cuda(cuda_backend::PromptGemm::run(handle, plan, w.get(), xb.get(), y.as<float>(), ws.get(), nullptr)));
    CUDA_CHECK(cudaMemcpy(first.data(), y.get(), s.N * 4, cudaMemcpyDeviceToHost));
    std::vector<uint16_t> shifted(xbh.size(), 0);
    std::memcpy(shifted.data() + 17 * s.K, xbh.data(), s.K * 2);
    CUDA_CHECK(cudaMemcpy(xb.get(), shifted.data(), shifted.size() * 2, cudaMemcpyHostToDevice));
    CUDA_CHECK(as_cuda(cuda_backend::PromptGemm::run(handle, plan, w.get(), xb.get(), y.as<float>(), ws.get(), nullptr)));
    CUDA_CHECK(cudaMemcpy(moved.data(), y.as<float>() + 17 * s.N, s.N * 4, cudaMemcpyDeviceToHost));
    r.checks.push_back({std::string("prefill row invariance ") + s.name,
                        std::memcmp(first.data(), moved.data(), s.N * 4) == 0,
                        "a row at place 0 and at place 17 of a 256-row tile"});
  }
}

}  // namespace vc::cuda::bench
