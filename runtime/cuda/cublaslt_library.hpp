// cuBLASLt, opened the first time a GPU backend needs it (dlopen) instead of linked:
// the library is about 540 MB, and linking it cost every process of this project,
// GPU or not, about 0.45 s and 210 MB of RSS at start (`vericache --help`: 0.02 s and
// 10 MB without it, on this project's CI machine kind).
#pragma once
#include <cublasLt.h>

#include <string>

namespace vc::cuda_backend {

/// The entry points the prompt GEMM uses.
struct CublasLt {
  decltype(&cublasLtCreate) create;
  decltype(&cublasLtDestroy) destroy;
  decltype(&cublasLtGetStatusName) status_name;
  decltype(&cublasLtGetStatusString) status_string;
  decltype(&cublasLtMatmulDescCreate) desc_create;
  decltype(&cublasLtMatmulDescDestroy) desc_destroy;
  decltype(&cublasLtMatmulDescSetAttribute) desc_set;
  decltype(&cublasLtMatrixLayoutCreate) layout_create;
  decltype(&cublasLtMatrixLayoutDestroy) layout_destroy;
  decltype(&cublasLtMatmulPreferenceCreate) pref_create;
  decltype(&cublasLtMatmulPreferenceDestroy) pref_destroy;
  decltype(&cublasLtMatmulPreferenceSetAttribute) pref_set;
  decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic;
  decltype(&cublasLtMatmulAlgoConfigGetAttribute) algo_get;
  decltype(&cublasLtMatmul) matmul;
  decltype(&cublasLtGetVersion) version;

  /// `s` in words ("CUBLAS_STATUS_NOT_SUPPORTED (...)").
  [[nodiscard]] std::string status(cublasStatus_t s) const;
};

/// The library of the toolkit's major version (libcublasLt.so.<CUBLAS_VER_MAJOR>:
/// another major version is another ABI), loaded once per process; nullptr when it
/// cannot be, with the reason in `why`.
[[nodiscard]] const CublasLt* cublaslt(std::string* why);

}  // namespace vc::cuda_backend
