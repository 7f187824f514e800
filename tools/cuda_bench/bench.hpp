// The GPU kernel benchmark's pieces: device buffers, timing with CUDA events, and one
// function per measured thing. Each result row carries what was moved and how long it
// took, so the table and the JSON are printed from the same numbers.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>
#include <vector>

namespace vc::cuda::bench {

/// One measured case: `bytes` moved per call (the roofline's numerator), `seconds`
/// per call (mean over the timed calls), `roofline_s` = bytes / the device-to-device
/// copy bandwidth (0 where not applicable).
struct Row {
  std::string group;  // "copy", "gemm", "attention", "drafter", "prefill" (bytes: FLOPs), "verify"
  std::string name;   // what ran, with its shape
  size_t rows = 0;    // M (batch rows), 0 where not applicable
  double bytes = 0;
  double seconds = 0;
  double roofline_s = 0;
  [[nodiscard]] double gbps() const { return seconds > 0 ? bytes / seconds / 1e9 : 0; }
  [[nodiscard]] double fraction() const { return seconds > 0 ? roofline_s / seconds : 0; }
};

/// A named pass/fail check made while benchmarking (batch invariance at real shapes).
struct Check {
  std::string name;
  bool ok = false;
  std::string detail;
};

struct Report {
  std::string device;
  double d2d_gbps = 0;  // bytes read + written per second by cudaMemcpy device to device
  std::vector<Row> rows;
  std::vector<Check> checks;
};

/// Device memory freed on scope exit; throws vc::Error when cudaMalloc fails.
class DeviceMem {
 public:
  explicit DeviceMem(size_t bytes);
  ~DeviceMem();
  DeviceMem(const DeviceMem&) = delete;
  DeviceMem& operator=(const DeviceMem&) = delete;
  [[nodiscard]] void* get() const { return p_; }
  template <class T>
  [[nodiscard]] T* as() const {
    return static_cast<T*>(p_);
  }

 private:
  void* p_ = nullptr;
};

/// Fills `bytes` of device memory with a pattern that reads as small finite f32, f16
/// and bf16 values (so timings are not those of zeros).
void fill_device(void* p, size_t bytes);

/// Mean seconds per call of `launch(i)` for i = warmup .. warmup+reps-1 on the default
/// stream, after `warmup` untimed calls (i = 0 .. warmup-1); `launch` returns the
/// launcher's cudaError_t.
template <class F>
double time_calls(F&& launch, int warmup, int reps);

/// Device-to-device copy bandwidth (counting read + write), and pinned host <->
/// device copies (the mover's peak to compare with).
void bench_copies(Report& r, bool quick);
/// The batch-invariant matmul at the Llama-3.1-8B layer shapes for decode and verify
/// row counts, and one decode step's GEMMs summed.
void bench_gemm(Report& r, bool quick);
/// Paged attention of decode and verify rows at several contexts.
void bench_attention(Report& r, bool quick);
/// The drafter's attention over 4x-compressed prefixes and a paged tail.
void bench_drafter(Report& r, bool quick);
/// Prompt rows: a 256-row tile through the pinned cuBLASLt GEMM and through the
/// matmul kernel, in FLOP/s, and the tile's row invariance at real shapes.
void bench_prefill(Report& r, bool quick);
/// A verify pass through the CUDA attention backend over one layer's KV lent from
/// pinned host memory chunk by chunk, chunked and staged whole, against the pinned
/// host-to-device copy of the same bytes.
void bench_verify(Report& r, bool quick);

}  // namespace vc::cuda::bench

#include "tools/cuda_bench/time_calls.hpp"
