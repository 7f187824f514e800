// Internal: SwiGLU generic over a SIMD traits type (simd_scalar.hpp, simd_avx2.hpp,
// simd_avx512.hpp): out = gate / (1 + exp(-gate)) * up, lane by lane, with the
// exp of exp_approx.hpp. Each element's value does not depend on n or its index.
#pragma once
#include <cstddef>

namespace vc::cpu {
namespace {  // internal linkage: one copy per instruction set, never merged

template <class T>
void swiglu_generic(const float* gate, const float* up, float* out, size_t n) {
  using V = typename T::V;
  const V one = T::set1(1.f), zero = T::zero();
  size_t i = 0;
  for (; i + T::W <= n; i += T::W) {
    const V g = T::load(gate + i);
    const V silu = T::div(g, T::add(one, T::exp(T::sub(zero, g))));
    T::store(out + i, T::mul(silu, T::load(up + i)));
  }
  if (i < n) {
    const size_t r = n - i;
    const V g = T::load_n(gate + i, r);
    const V silu = T::div(g, T::add(one, T::exp(T::sub(zero, g))));
    T::store_n(out + i, T::mul(silu, T::load_n(up + i, r)), r);
  }
}

}  // namespace
}  // namespace vc::cpu
