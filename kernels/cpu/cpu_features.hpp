// Which SIMD paths this CPU can run, and which one the kernels use.
#pragma once
#include <string_view>

namespace vc::cpu {

/// A SIMD code path. Each kernel has one implementation per path; a process uses
/// one path for everything, so results are reproducible within a run and within a
/// machine. Paths give slightly different (each deterministic) roundings.
/// avx512bf16 is the avx512 path except for matmuls with bf16 weights, where x is
/// rounded to bf16 and bf16 pairs are multiplied by VDPBF16PS (as llama.cpp does
/// for bf16 weights): twice the multiply-adds per instruction, activations carried
/// to 8 significant bits inside those matmuls. amx is the same with the bf16 matmuls
/// on AMX tiles (TDPBF16PS: one f32 accumulator per output element, 16 x 16 outputs
/// per instruction).
enum class SimdPath { scalar, avx2, avx512, avx512bf16, amx };

/// Every path, supported by this CPU or not.
inline constexpr SimdPath kAllSimdPaths[] = {SimdPath::scalar, SimdPath::avx2, SimdPath::avx512,
                                             SimdPath::avx512bf16, SimdPath::amx};

/// The default path: avx512bf16 on AMD CPUs with AVX512_BF16 (where VDPBF16PS does
/// twice the multiply-adds of an FMA), else best_f32_simd_path(). amx (AMX-TILE,
/// AMX-BF16, the OS's permission for tile data) is only chosen explicitly.
[[nodiscard]] SimdPath best_simd_path();
/// Best path the running CPU supports that keeps activations in f32 in every matmul
/// (cpuid: AVX2+FMA+F16C; AVX-512 F/BW/VL/DQ): the reference for accuracy checks.
[[nodiscard]] SimdPath best_f32_simd_path();
/// True for the paths that round activations to bf16 before bf16-weight matmuls.
[[nodiscard]] bool simd_path_rounds_activations(SimdPath p);
/// True when the running CPU can execute `p`.
[[nodiscard]] bool simd_path_supported(SimdPath p);
/// What `p` needs of the CPU and OS, for error messages ("AVX2, FMA and F16C", ...).
[[nodiscard]] std::string_view simd_path_needs(SimdPath p);
/// The path kernels use now (defaults to best_simd_path()).
[[nodiscard]] SimdPath active_simd_path();
/// Select the path (tests and benchmarks); throws vc::Error if unsupported.
void set_simd_path(SimdPath p);
[[nodiscard]] std::string_view simd_path_name(SimdPath p);
/// The path named `name` ("scalar", "avx2", "avx512", "avx512bf16", "amx"); throws vc::Error
/// naming the accepted names otherwise (supported or not is set_simd_path's check).
[[nodiscard]] SimdPath simd_path_from_name(std::string_view name);

}  // namespace vc::cpu
