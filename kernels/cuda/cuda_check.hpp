// CUDA_CHECK: turns a failed CUDA runtime call into a vc::Error that names the
// source file, the line, the call and the CUDA error string.
#pragma once
#include <cuda_runtime_api.h>

#include <string>

#include "kernels/error.hpp"

/// Evaluates `expr` (a cudaError_t); on failure throws vc::Error
/// "file:line: expr failed: <cudaGetErrorName>: <cudaGetErrorString>".
#define CUDA_CHECK(expr)                                                                 \
  do {                                                                                   \
    const cudaError_t vc_cuda_err_ = (expr);                                             \
    if (vc_cuda_err_ != cudaSuccess) {                                                   \
      throw ::vc::Error(std::string(__FILE__) + ":" + std::to_string(__LINE__) + ": " + \
                        #expr + " failed: " + cudaGetErrorName(vc_cuda_err_) + ": " +    \
                        cudaGetErrorString(vc_cuda_err_));                               \
    }                                                                                    \
  } while (0)
