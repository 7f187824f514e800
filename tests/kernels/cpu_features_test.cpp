// Tests of the SIMD path selection (kernels/cpu/cpu_features.hpp).
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "kernels/cpu/cpu_features.hpp"
#include "kernels/error.hpp"
#include "tests/kernels/kernel_test_util.hpp"

namespace vc::cpu {
namespace {

TEST(cpu_features, scalar_and_the_best_path_are_always_supported) {
  EXPECT_TRUE(simd_path_supported(SimdPath::scalar));
  EXPECT_TRUE(simd_path_supported(best_simd_path()));
  // The default is the best path (every test restores the path it changes).
  EXPECT_EQ(active_simd_path(), best_simd_path());
  // amx is never the default (single-row decode is slower on tiles), only chosen.
  EXPECT_NE(best_simd_path(), SimdPath::amx);
  EXPECT_TRUE(simd_path_supported(best_f32_simd_path()));
  EXPECT_FALSE(simd_path_rounds_activations(best_f32_simd_path()));
  if (simd_path_supported(SimdPath::avx512)) {
    EXPECT_EQ(best_f32_simd_path(), SimdPath::avx512);
  }
  // The default is the f32 path, or avx512bf16 where the CPU has it (AMD only).
  if (best_simd_path() != best_f32_simd_path()) {
    EXPECT_EQ(best_simd_path(), SimdPath::avx512bf16);
  }
  if (simd_path_supported(SimdPath::avx512bf16)) {
    EXPECT_TRUE(simd_path_supported(SimdPath::avx512));
  }
  if (simd_path_supported(SimdPath::amx)) {  // its other kernels are avx512bf16's
    EXPECT_TRUE(simd_path_supported(SimdPath::avx512bf16));
  }
  if (simd_path_supported(SimdPath::avx512)) {
    EXPECT_TRUE(simd_path_supported(SimdPath::avx2));
  }
}

TEST(cpu_features, amd_cpus_with_avx512_bf16_default_to_the_bf16_dot_product_path) {
  // The vendor as the kernel reports it, independently of the code under test.
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  bool amd = false;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("vendor_id", 0) == 0) {
      amd = line.find("AuthenticAMD") != std::string::npos;
      break;
    }
  }
  if (amd && simd_path_supported(SimdPath::avx512bf16)) {
    EXPECT_EQ(best_simd_path(), SimdPath::avx512bf16);
  } else {
    EXPECT_EQ(best_simd_path(), best_f32_simd_path());
  }
}

TEST(cpu_features, the_paths_that_round_activations_to_bf16_are_avx512bf16_and_amx) {
  EXPECT_FALSE(simd_path_rounds_activations(SimdPath::scalar));
  EXPECT_FALSE(simd_path_rounds_activations(SimdPath::avx2));
  EXPECT_FALSE(simd_path_rounds_activations(SimdPath::avx512));
  EXPECT_TRUE(simd_path_rounds_activations(SimdPath::avx512bf16));
  EXPECT_TRUE(simd_path_rounds_activations(SimdPath::amx));
}

TEST(cpu_features, set_simd_path_selects_each_supported_path_and_rejects_the_others) {
  test::SimdPathGuard guard;
  for (SimdPath p : kAllSimdPaths) {
    if (simd_path_supported(p)) {
      set_simd_path(p);
      EXPECT_EQ(active_simd_path(), p);
    } else {
      const SimdPath before = active_simd_path();
      try {
        set_simd_path(p);
        ADD_FAILURE() << "an unsupported path was accepted: " << simd_path_name(p);
      } catch (const vc::Error& e) {  // the message says what the path needs
        EXPECT_NE(std::string(e.what()).find(simd_path_needs(p)), std::string::npos) << e.what();
      }
      EXPECT_EQ(active_simd_path(), before);
    }
  }
}

TEST(cpu_features, every_path_says_what_it_needs_of_the_cpu) {
  EXPECT_EQ(simd_path_needs(SimdPath::scalar), "nothing");
  EXPECT_NE(simd_path_needs(SimdPath::avx2).find("AVX2"), std::string_view::npos);
  EXPECT_NE(simd_path_needs(SimdPath::avx512bf16).find("AVX512_BF16"), std::string_view::npos);
  EXPECT_NE(simd_path_needs(SimdPath::amx).find("AMX-BF16"), std::string_view::npos);
  EXPECT_NE(simd_path_needs(SimdPath::amx).find("Linux"), std::string_view::npos);
}

TEST(cpu_features, paths_have_names) {
  EXPECT_EQ(simd_path_name(SimdPath::scalar), "scalar");
  EXPECT_EQ(simd_path_name(SimdPath::avx2), "avx2");
  EXPECT_EQ(simd_path_name(SimdPath::avx512), "avx512");
  EXPECT_EQ(simd_path_name(SimdPath::avx512bf16), "avx512bf16");
  EXPECT_EQ(simd_path_name(SimdPath::amx), "amx");
}

TEST(cpu_features, every_path_is_found_by_its_name_and_an_unknown_name_is_an_error) {
  for (SimdPath p : kAllSimdPaths) EXPECT_EQ(simd_path_from_name(simd_path_name(p)), p);
  try {
    (void)simd_path_from_name("avx1024");
    FAIL() << "an unknown name was accepted";
  } catch (const vc::Error& e) {
    EXPECT_NE(std::string(e.what()).find("'avx1024'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("avx512bf16"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("amx"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace vc::cpu
