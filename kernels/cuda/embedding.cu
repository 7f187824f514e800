// Embedding gather (see embedding.cuh): one thread block per token, threads stride
// over the row (neighbouring threads read neighbouring elements: coalesced).
#include "kernels/cuda/dtype_load.cuh"
#include "kernels/cuda/embedding.cuh"

namespace vc::cuda {

template <DType T>
static __global__ void embedding_kernel(const int32_t* __restrict__ ids, const void* table,
                                        size_t vocab, size_t dim, float* __restrict__ out,
                                        int* bad_ids) {
  const int32_t id = ids[blockIdx.x];
  float* row = out + size_t(blockIdx.x) * dim;
  if (id < 0 || size_t(id) >= vocab) {
    for (size_t i = threadIdx.x; i < dim; i += blockDim.x) row[i] = 0.f;
    if (threadIdx.x == 0 && bad_ids != nullptr) atomicAdd(bad_ids, 1);
    return;
  }
  const size_t base = size_t(id) * dim;
  for (size_t i = threadIdx.x; i < dim; i += blockDim.x) row[i] = load_f32<T>(table, base + i);
}

cudaError_t launch_embedding(const int32_t* ids, size_t M, const void* table, DType dt,
                             size_t vocab, size_t dim, float* out, int* bad_ids,
                             cudaStream_t stream) {
  if (M == 0 || dim == 0) return cudaSuccess;
  if (M > 0x7fffffffu) return cudaErrorInvalidValue;  // gridDim.x limit
  const unsigned threads = dim >= 256 ? 256u : unsigned((dim + 31) / 32 * 32);
  switch (dt) {
    case DType::f32:
      embedding_kernel<DType::f32>
          <<<unsigned(M), threads, 0, stream>>>(ids, table, vocab, dim, out, bad_ids);
      break;
    case DType::f16:
      embedding_kernel<DType::f16>
          <<<unsigned(M), threads, 0, stream>>>(ids, table, vocab, dim, out, bad_ids);
      break;
    case DType::bf16:
      embedding_kernel<DType::bf16>
          <<<unsigned(M), threads, 0, stream>>>(ids, table, vocab, dim, out, bad_ids);
      break;
  }
  return cudaGetLastError();
}

}  // namespace vc::cuda
