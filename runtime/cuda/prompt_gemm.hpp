// Prompt rows on the GPU (LinearBackend::linear_prompt): cuBLASLt's tensor-core GEMM
// over the rows rounded to bf16, for bf16 weight matrices.
//
// What makes its rows batch invariant among themselves (a prompt row's bits must not
// depend on how the prompt was cut into chunks, shared, or fetched: see
// linear_backend.hpp), and deterministic:
//   - every call has the same shape: kPromptTileRows rows (a chunk's last tile padded
//     with zero rows), so one matrix always runs one algorithm on one shape;
//   - the algorithm is chosen once per matrix and pinned (cublasLtMatmulAlgo_t kept),
//     never re-chosen per call by the heuristic;
//   - only algorithms without split-K or any reduction are taken
//     (CUBLASLT_REDUCTION_SCHEME_NONE: "the dot-product shall be performed in one
//     sequence"), so each output element is one accumulation over K, in one order,
//     whatever tile it falls in;
//   - the workspace is fixed (kPromptWorkspaceBytes) for the choice and every call.
// tests/cuda/cuda_linear_test.cpp checks rows alone, in tiles and across tile
// boundaries bit for bit on a GPU. Matrices in f16 or f32, or for which cuBLASLt
// offers no such algorithm, take the matmul kernel for their prompt rows too (every
// time: the choice is per matrix).
#pragma once
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "runtime/cuda/cublaslt_library.hpp"

namespace vc::cuda_backend {

/// Rows of every cuBLASLt call.
constexpr size_t kPromptTileRows = 256;
/// Workspace of every call (and of the algorithm's choice).
constexpr size_t kPromptWorkspaceBytes = size_t(32) << 20;

/// A bf16 matrix's product, planned once: descriptors for [kPromptTileRows, K] bf16
/// rows times W[N, K]^T (+ bias) into [kPromptTileRows, N] f32, and its algorithm.
struct PromptPlan {
  const CublasLt* lib = nullptr;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t w = nullptr, x = nullptr, y = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool usable = false;  ///< false: no algorithm without a reduction; use the matmul kernel
  ~PromptPlan();
};

class PromptGemm {
 public:
  /// The plan of the matrix at device address `w` ([N, K] bf16), with `bias` (f32 [N],
  /// device) or nullptr, made on first use with `handle`. Throws vc::Error naming
  /// `device` when cuBLASLt fails (not when it offers no algorithm: usable = false).
  const PromptPlan& plan(const CublasLt& lib, cublasLtHandle_t handle, const void* w, size_t N, size_t K,
                         const float* bias, const std::string& device);

  /// y_tile[kPromptTileRows, N] = x_tile[kPromptTileRows, K] (bf16) · W^T (+ bias) on
  /// `stream`, with `workspace` (kPromptWorkspaceBytes). Returns cuBLASLt's status.
  static cublasStatus_t run(cublasLtHandle_t handle, const PromptPlan& p, const void* w, const void* x_tile,
                            float* y_tile, void* workspace, cudaStream_t stream);

 private:
  std::mutex mu_;
  std::map<std::pair<const void*, const float*>, std::unique_ptr<PromptPlan>> plans_;  // (W, bias) on the device
};

}  // namespace vc::cuda_backend
