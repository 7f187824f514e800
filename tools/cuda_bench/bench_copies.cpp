// Copy bandwidths: device to device (the HBM roofline every kernel is held against)
// and pinned host <-> device (the peak the PCIe mover will be held against).
#include "kernels/cuda/cuda_check.hpp"
#include "tools/cuda_bench/bench.hpp"

namespace vc::cuda::bench {

DeviceMem::DeviceMem(size_t bytes) { CUDA_CHECK(cudaMalloc(&p_, bytes ? bytes : 1)); }
DeviceMem::~DeviceMem() { cudaFree(p_); }

// Every byte 0x3c: each f32 reads 0.0115, each bf16 0.0115, each f16 1.06.
void fill_device(void* p, size_t bytes) { CUDA_CHECK(cudaMemset(p, 0x3c, bytes)); }

void bench_copies(Report& r, bool quick) {
  const size_t bytes = (quick ? size_t(256) : size_t(1024)) << 20;
  DeviceMem a(bytes), b(bytes);
  fill_device(a.get(), bytes);
  const double d2d = time_calls(
      [&](int) { return cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice); }, 2,
      quick ? 5 : 20);
  r.d2d_gbps = 2.0 * double(bytes) / d2d / 1e9;
  // The roofline itself: 100% by definition.
  r.rows.push_back({"copy", "device to device (read + write)", 0, 2.0 * double(bytes), d2d, d2d});

  void* host = nullptr;
  const size_t hbytes = size_t(256) << 20;
  CUDA_CHECK(cudaHostAlloc(&host, hbytes, cudaHostAllocDefault));
  const double h2d = time_calls(
      [&](int) { return cudaMemcpyAsync(a.get(), host, hbytes, cudaMemcpyHostToDevice); }, 1,
      quick ? 3 : 10);
  r.rows.push_back({"copy", "pinned host to device", 0, double(hbytes), h2d, 0});
  const double d2h = time_calls(
      [&](int) { return cudaMemcpyAsync(host, a.get(), hbytes, cudaMemcpyDeviceToHost); }, 1,
      quick ? 3 : 10);
  r.rows.push_back({"copy", "device to pinned host", 0, double(hbytes), d2h, 0});
  CUDA_CHECK(cudaFreeHost(host));
}

}  // namespace vc::cuda::bench
