// Internal: per-SIMD-path entry points of the element-wise ops that have SIMD
// variants (swiglu: its exp dominates), dispatched from elementwise.cpp.
#pragma once
#include <cstddef>

namespace vc::cpu {

void swiglu_scalar(const float* gate, const float* up, float* out, size_t n);
void swiglu_avx2(const float* gate, const float* up, float* out, size_t n);
void swiglu_avx512(const float* gate, const float* up, float* out, size_t n);

}  // namespace vc::cpu
