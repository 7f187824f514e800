// Helpers shared by the kernel tests: run a check on every SIMD path the CPU
// supports (restoring the active path afterwards), random data, weight encoding.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <iostream>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_features.hpp"
#include "kernels/dtype.hpp"

namespace vc::test {

/// Restores the active SIMD path when it goes out of scope.
class SimdPathGuard {
 public:
  SimdPathGuard() : saved_(cpu::active_simd_path()) {}
  ~SimdPathGuard() { cpu::set_simd_path(saved_); }
  SimdPathGuard(const SimdPathGuard&) = delete;
  SimdPathGuard& operator=(const SimdPathGuard&) = delete;

 private:
  cpu::SimdPath saved_;
};

/// For its scope, the best path that keeps activations in f32 (the accuracy reference),
/// then the path that was active: checks against float64 references at f32 tolerances
/// use it, whatever the default path rounds (avx512bf16 is the default on some CPUs).
class F32PathScope {
 public:
  F32PathScope() { cpu::set_simd_path(cpu::best_f32_simd_path()); }

 private:
  SimdPathGuard restore_;
};

/// Calls fn(path) with each supported path active; unsupported ones are reported
/// and skipped.
template <class Fn>
void for_each_simd_path(Fn fn) {
  SimdPathGuard guard;
  for (cpu::SimdPath p : cpu::kAllSimdPaths) {
    if (!cpu::simd_path_supported(p)) {
      std::cout << "[ SKIPPED  ] SIMD path " << cpu::simd_path_name(p)
                << ": not supported by this CPU\n";
      continue;
    }
    cpu::set_simd_path(p);
    SCOPED_TRACE(std::string("SIMD path ") + std::string(cpu::simd_path_name(p)));
    fn(p);
  }
}

inline std::vector<float> random_floats(std::mt19937& rng, size_t n, float lo = -1.f,
                                        float hi = 1.f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

/// Values encoded in `t` (bytes) and the f32 values they actually hold.
struct Encoded {
  std::vector<uint8_t> bytes;
  std::vector<float> values;
};

inline Encoded encode(const std::vector<float>& v, DType t) {
  Encoded e;
  e.bytes.resize(v.size() * dtype_size(t));
  from_f32(t, v.data(), e.bytes.data(), v.size());
  e.values.resize(v.size());
  to_f32(t, e.bytes.data(), e.values.data(), v.size());
  return e;
}

inline const DType kAllDTypes[] = {DType::f32, DType::f16, DType::bf16};

}  // namespace vc::test
