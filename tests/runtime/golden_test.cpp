// The forward pass against an independent float64 PyTorch implementation of the
// bundled model (tests/data/visible.json), on each SIMD path (how it decides:
// golden_check.hpp).
#include <gtest/gtest.h>

#include <cstdio>

#include "kernels/cpu/cpu_features.hpp"
#include "tests/runtime/golden_check.hpp"

namespace vc {
namespace {

using test::Tolerance;
using test::check_against_golden;

/// Runs the check on `path` (restoring the active path afterwards).
void check_on_path(cpu::SimdPath path, const Tolerance& t) {
  const cpu::SimdPath saved = cpu::active_simd_path();
  cpu::set_simd_path(path);
  struct Restore {
    cpu::SimdPath p;
    ~Restore() { cpu::set_simd_path(p); }
  } restore{saved};
  std::printf("  SIMD path %s\n", std::string(cpu::simd_path_name(path)).c_str());
  check_against_golden(t);
}


// The f32 paths keep activations in f32 in every matmul (all but avx512bf16, amx).
TEST(golden, f32_kv_matches_the_float64_reference_logits_and_greedy_tokens) {
  check_on_path(cpu::best_f32_simd_path(), {DType::f32, 1e-4f});
}

TEST(golden, bf16_kv_matches_the_float64_reference_within_the_bf16_rounding_bound) {
  // bf16 KV rounding moves logits by up to ~7e-3 in the reference's own measurement.
  check_on_path(cpu::best_f32_simd_path(), {DType::bf16, 2e-2f});
}

TEST(golden, the_default_path_matches_the_reference_within_its_activation_bound) {
  const cpu::SimdPath best = cpu::best_simd_path();
  const bool rounds = cpu::simd_path_rounds_activations(best);
  check_on_path(best, {DType::f32, rounds ? 2e-2f : 1e-4f});
}

TEST(golden, the_bf16_dot_product_path_matches_the_reference_within_the_bf16_activation_bound) {
  if (!cpu::simd_path_supported(cpu::SimdPath::avx512bf16)) {
    GTEST_SKIP() << "this CPU has no AVX512_BF16 (the avx512bf16 path cannot run)";
  }
  // Rounding the activations to bf16 before each bf16-weight matmul moves the first
  // logits by up to ~1.1e-2 with f32 KV and ~1.7e-2 with bf16 KV (measured here).
  check_on_path(cpu::SimdPath::avx512bf16, {DType::f32, 2e-2f});
  check_on_path(cpu::SimdPath::avx512bf16, {DType::bf16, 3e-2f});
}

TEST(golden, the_amx_path_matches_the_reference_within_the_bf16_activation_bound) {
  if (!cpu::simd_path_supported(cpu::SimdPath::amx)) {
    GTEST_SKIP() << "this CPU or OS cannot run AMX tiles (the amx path cannot run)";
  }
  // The same bf16 activations as avx512bf16, summed in one f32 accumulator per element.
  check_on_path(cpu::SimdPath::amx, {DType::f32, 2e-2f});
  check_on_path(cpu::SimdPath::amx, {DType::bf16, 3e-2f});
}

}  // namespace
}  // namespace vc
