// cuBLASLt for prompt rows (see prompt_gemm.hpp): the plan of a matrix, made once,
// and the call. Column-major in cuBLASLt's terms: y^T [N, T] = W [N, K] · x^T [K, T],
// with W (row-major [N, K]) read as a K x N column-major matrix transposed, x
// (row-major [T, K]) as K x T column-major, y (row-major [T, N]) as N x T.
#include "runtime/cuda/prompt_gemm.hpp"

#include <cstdint>

#include "kernels/error.hpp"

namespace vc::cuda_backend {
namespace {

void check(const CublasLt& lib, cublasStatus_t s, const std::string& device, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) throw Error("device " + device + ": cuBLASLt " + what + ": " + lib.status(s));
}

}  // namespace

PromptPlan::~PromptPlan() {
  if (y != nullptr) lib->layout_destroy(y);
  if (x != nullptr) lib->layout_destroy(x);
  if (w != nullptr) lib->layout_destroy(w);
  if (op != nullptr) lib->desc_destroy(op);
}

const PromptPlan& PromptGemm::plan(const CublasLt& lib, cublasLtHandle_t handle, const void* w, size_t N,
                                   size_t K, const float* bias, const std::string& device) {
  std::lock_guard lock(mu_);
  auto& slot = plans_[{w, bias}];
  if (slot) return *slot;
  auto p = std::make_unique<PromptPlan>();
  p->lib = &lib;
  check(lib, lib.desc_create(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F), device, "matmul descriptor");
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  check(lib, lib.desc_set(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), device, "TRANSA");
  check(lib, lib.desc_set(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), device, "TRANSB");
  if (bias != nullptr) {
    const cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_BIAS;
    const int32_t bias_type = CUDA_R_32F;
    check(lib, lib.desc_set(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep), device,
          "bias epilogue");
    check(lib, lib.desc_set(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias), device,
          "bias pointer");
    check(lib, lib.desc_set(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                         sizeof bias_type),
          device, "bias type");
  }
  const auto n = uint64_t(N), k = uint64_t(K), t = uint64_t(kPromptTileRows);
  check(lib, lib.layout_create(&p->w, CUDA_R_16BF, k, n, int64_t(k)), device, "weight layout");
  check(lib, lib.layout_create(&p->x, CUDA_R_16BF, k, t, int64_t(k)), device, "row layout");
  check(lib, lib.layout_create(&p->y, CUDA_R_32F, n, t, int64_t(n)), device, "result layout");

  cublasLtMatmulPreference_t pref = nullptr;
  check(lib, lib.pref_create(&pref), device, "preference");
  struct PrefGuard {
    const CublasLt& lib;
    cublasLtMatmulPreference_t p;
    ~PrefGuard() { lib.pref_destroy(p); }
  } guard{lib, pref};
  const uint64_t ws = kPromptWorkspaceBytes;
  const uint32_t reductions = CUBLASLT_REDUCTION_SCHEME_NONE;
  check(lib, lib.pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
        device, "workspace preference");
  check(lib, lib.pref_set(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reductions,
                                             sizeof reductions),
        device, "reduction preference");
  constexpr int kAsked = 8;
  cublasLtMatmulHeuristicResult_t found[kAsked] = {};
  int count = 0;
  const cublasStatus_t h =
      lib.heuristic(handle, p->op, p->w, p->x, p->y, p->y, pref, kAsked, found, &count);
  if (h != CUBLAS_STATUS_NOT_SUPPORTED) check(lib, h, device, "algorithm heuristic");
  for (int i = 0; i < count && h == CUBLAS_STATUS_SUCCESS; ++i) {
    if (found[i].state != CUBLAS_STATUS_SUCCESS || found[i].workspaceSize > kPromptWorkspaceBytes) continue;
    int32_t splits = 1;
    uint32_t scheme = CUBLASLT_REDUCTION_SCHEME_NONE;
    size_t written = 0;
    if (lib.algo_get(&found[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits,
                                             sizeof splits, &written) != CUBLAS_STATUS_SUCCESS ||
        lib.algo_get(&found[i].algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme,
                                             sizeof scheme, &written) != CUBLAS_STATUS_SUCCESS)
      continue;
    if (splits > 1 || scheme != CUBLASLT_REDUCTION_SCHEME_NONE) continue;
    p->algo = found[i].algo;
    p->usable = true;
    break;
  }
  slot = std::move(p);
  return *slot;
}

cublasStatus_t PromptGemm::run(cublasLtHandle_t handle, const PromptPlan& p, const void* w, const void* x_tile,
                               float* y_tile, void* workspace, cudaStream_t stream) {
  const float alpha = 1.0f, beta = 0.0f;
  return p.lib->matmul(handle, p.op, &alpha, w, p.w, x_tile, p.x, &beta, y_tile, p.y, y_tile, p.y, &p.algo,
                        workspace, kPromptWorkspaceBytes, stream);
}

}  // namespace vc::cuda_backend
