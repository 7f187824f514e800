// Device-only (include from .cu files): reads of weights and KV stored as f32, f16 or
// bf16, converted exactly to f32 -- the GPU side of vc::to_f32 (kernels/dtype.hpp).
// Wide loads are 16 bytes (8 elements of a 16-bit type, 4 of f32): the widest a
// thread can issue in one instruction, so a warp reads 512 contiguous bytes at once.
#pragma once
#include <cuda_fp16.h>

#include <cstddef>
#include <cstdint>

#include "kernels/dtype.hpp"

namespace vc::cuda {

/// Storage element of a tensor in `T`.
template <DType T>
struct Elem {
  using type = uint16_t;
};
template <>
struct Elem<DType::f32> {
  using type = float;
};

/// One stored element to f32 (exact for every type).
template <DType T>
__device__ __forceinline__ float elem_to_f32(typename Elem<T>::type v) {
  if constexpr (T == DType::f32) {
    return v;
  } else if constexpr (T == DType::bf16) {
    return __uint_as_float(uint32_t(v) << 16);  // bf16 bits are the high half of an f32
  } else {
    return __half2float(__ushort_as_half(v));
  }
}

/// Element i of `base` (an array of T), as f32.
template <DType T>
__device__ __forceinline__ float load_f32(const void* base, size_t i) {
  return elem_to_f32<T>(__ldg(static_cast<const typename Elem<T>::type*>(base) + i));
}

/// Elements [i, i + 8) of `base` as f32. Needs i * sizeof(element) and `base` 16-byte
/// aligned (one 16-byte load for 16-bit types, two for f32).
template <DType T>
__device__ __forceinline__ void load8_f32(const void* base, size_t i, float out[8]) {
  if constexpr (T == DType::f32) {
    const float4* p = reinterpret_cast<const float4*>(static_cast<const float*>(base) + i);
    const float4 a = __ldg(p), b = __ldg(p + 1);
    out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w;
    out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
  } else {
    const uint4 raw = __ldg(reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(base) + i));
    const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
    for (int j = 0; j < 4; ++j) {
      out[2 * j] = elem_to_f32<T>(uint16_t(w[j] & 0xffffu));
      out[2 * j + 1] = elem_to_f32<T>(uint16_t(w[j] >> 16));
    }
  }
}

}  // namespace vc::cuda
