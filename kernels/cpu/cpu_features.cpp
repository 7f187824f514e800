// Run-time CPU feature detection (cpuid through the compiler's builtins) and the
// process-wide choice of SIMD path that every kernel dispatches on.
#include "kernels/cpu/cpu_features.hpp"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <string>

#include "kernels/error.hpp"

namespace vc::cpu {
namespace {

// __builtin_cpu_supports reads cpuid once (in libgcc) and also checks that the OS
// saves the wide registers (XCR0), so a "yes" means the instructions really run.
bool cpu_has_f16c() {
#if defined(__clang__)
  // clang 14's __builtin_cpu_supports does not know "f16c": cpuid leaf 1, ECX bit 29
  // (the AVX2 check above it already covers the OS's XCR0 state).
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
#else
  return __builtin_cpu_supports("f16c");
#endif
}

bool cpu_has_avx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
}

bool cpu_has_avx512() {
  __builtin_cpu_init();
  return cpu_has_avx2() && __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512dq");
}

// AVX512_BF16: cpuid leaf 7 sub-leaf 1, EAX bit 5 (asked directly: clang 14's
// __builtin_cpu_supports does not know it); the AVX-512 check covers XCR0.
bool cpu_has_avx512bf16() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return cpu_has_avx512() && __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) != 0 &&
         (eax & (1u << 5)) != 0;
}

// cpuid leaf 0's vendor string (EBX, EDX, ECX) is "AuthenticAMD".
bool cpu_is_amd() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(0, &eax, &ebx, &ecx, &edx) == 0) return false;
  char vendor[13] = {};
  std::memcpy(vendor, &ebx, 4);
  std::memcpy(vendor + 4, &edx, 4);
  std::memcpy(vendor + 8, &ecx, 4);
  return std::string_view(vendor) == "AuthenticAMD";
}

// AMX-TILE and AMX-BF16 (cpuid leaf 7, EDX bits 24 and 22), the OS saving tile state
// (XCR0 bits 17 and 18), and Linux's per-process permission to use tile data
// (arch_prctl ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA, Linux 5.16+), asked for
// once: without it the first tile instruction kills the process with SIGILL.
bool cpu_has_amx() {
  static const bool ok = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!cpu_has_avx512bf16() || __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0 ||
        (edx & (1u << 24)) == 0 || (edx & (1u << 22)) == 0) {
      return false;
    }
    if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0 || (ecx & (1u << 27)) == 0) return false;
    unsigned xcr0_lo = 0, xcr0_hi = 0;
    __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    if ((xcr0_lo & (3u << 17)) != (3u << 17)) return false;
#if defined(__linux__) && defined(SYS_arch_prctl)
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
    return false;
#endif
  }();
  return ok;
}

// The active path: one atomic, read by every kernel call (a relaxed load is enough:
// the value only changes between kernel calls, from tests and benchmarks).
std::atomic<SimdPath>& active_path() {
  static std::atomic<SimdPath> path{best_simd_path()};
  return path;
}

}  // namespace

SimdPath best_f32_simd_path() {
  static const SimdPath best = cpu_has_avx512() ? SimdPath::avx512
                               : cpu_has_avx2() ? SimdPath::avx2
                                                : SimdPath::scalar;
  return best;
}

SimdPath best_simd_path() {
  // AMD's AVX512_BF16 (Zen 4, Zen 5) runs VDPBF16PS at the rate of a 512-bit FMA,
  // twice the multiply-adds: on those CPUs the bf16 path is the default, as llama.cpp
  // multiplies bf16 weights (prefill 1B shape on Zen 4: 104 -> 176 tok/s). On Sapphire
  // Rapids VDPBF16PS runs at half the FMA rate (measured): no gain, so Intel keeps
  // f32 activations; amx (faster prefill, slower single-row decode) stays a choice.
  static const SimdPath best = cpu_has_avx512bf16() && cpu_is_amd() ? SimdPath::avx512bf16
                                                                    : best_f32_simd_path();
  return best;
}

bool simd_path_rounds_activations(SimdPath p) {
  return p == SimdPath::avx512bf16 || p == SimdPath::amx;
}

bool simd_path_supported(SimdPath p) {
  switch (p) {
    case SimdPath::scalar:
      return true;
    case SimdPath::avx2:
      return cpu_has_avx2();
    case SimdPath::avx512:
      return cpu_has_avx512();
    case SimdPath::avx512bf16:
      return cpu_has_avx512bf16();
    case SimdPath::amx:
      return cpu_has_amx();
  }
  return false;
}

std::string_view simd_path_needs(SimdPath p) {
  switch (p) {
    case SimdPath::scalar:
      return "nothing";
    case SimdPath::avx2:
      return "AVX2, FMA and F16C";
    case SimdPath::avx512:
      return "AVX-512 F, BW, VL and DQ (and AVX2)";
    case SimdPath::avx512bf16:
      return "AVX512_BF16 (and AVX-512)";
    case SimdPath::amx:
      return "AMX-TILE and AMX-BF16 (and AVX512_BF16), and Linux 5.16 or later granting the "
             "process AMX tile state";
  }
  return "an unknown path";
}

SimdPath active_simd_path() { return active_path().load(std::memory_order_relaxed); }

void set_simd_path(SimdPath p) {
  if (!simd_path_supported(p)) {
    throw Error("set_simd_path: this CPU does not support the " +
                std::string(simd_path_name(p)) + " path (it needs " +
                std::string(simd_path_needs(p)) + "; best supported: " +
                std::string(simd_path_name(best_simd_path())) + ")");
  }
  active_path().store(p, std::memory_order_relaxed);
}

std::string_view simd_path_name(SimdPath p) {
  switch (p) {
    case SimdPath::scalar:
      return "scalar";
    case SimdPath::avx2:
      return "avx2";
    case SimdPath::avx512:
      return "avx512";
    case SimdPath::avx512bf16:
      return "avx512bf16";
    case SimdPath::amx:
      return "amx";
  }
  return "unknown";
}

SimdPath simd_path_from_name(std::string_view name) {
  for (SimdPath p : kAllSimdPaths) {
    if (simd_path_name(p) == name) return p;
  }
  throw Error("unknown SIMD path '" + std::string(name) +
              "' (expected scalar, avx2, avx512, avx512bf16 or amx)");
}

}  // namespace vc::cpu
