// Which SIMD paths this CPU can run, and which one the kernels use.
#pragma once
#include <string_view>

namespace vc::cpu {

/// A SIMD code path. Each kernel has one implementation per path; a process uses
/// one path for everything, so results are reproducible within a run and within a
/// machine. Paths give slightly different (each deterministic) roundings.
enum class SimdPath { scalar, avx2, avx512 };

/// Best path the running CPU supports (cpuid: AVX2+FMA+F16C; AVX-512 F/BW/VL).
[[nodiscard]] SimdPath best_simd_path();
/// True when the running CPU can execute `p`.
[[nodiscard]] bool simd_path_supported(SimdPath p);
/// The path kernels use now (defaults to best_simd_path()).
[[nodiscard]] SimdPath active_simd_path();
/// Select the path (tests and benchmarks); throws vc::Error if unsupported.
void set_simd_path(SimdPath p);
[[nodiscard]] std::string_view simd_path_name(SimdPath p);

}  // namespace vc::cpu
