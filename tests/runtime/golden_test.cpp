// The forward pass against an independent float64 PyTorch implementation of the
// bundled model (tests/data/visible.json).
//
// How it decides: first-step logits must lie within `tol` of the reference (max abs
// error reported). A logit error of at most `tol` on each of two logits can change
// their gap by at most 2*tol, so greedy tokens must equal the reference at every
// step up to the first step whose top1 margin is below 2*tol; after that step the
// reference may legitimately diverge and the comparison stops.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "kernels/cpu/cpu_features.hpp"
#include "runtime/generator.hpp"
#include "tests/runtime/test_support.hpp"

namespace vc {
namespace {

struct Tolerance {
  DType kv;
  float tol;
};

void check_against_golden(const Tolerance& t) {
  const auto& g = test::golden();
  GeneratorConfig gc;
  gc.kv_dtype = t.kv;
  gc.max_context = 2048;
  Generator gen(test::tinycode(), test::tinycode_tokenizer(), gc);
  float worst = 0;
  for (const auto& c : g["cases"]) {
    const std::string name = c["name"];
    const auto prompt = c["prompt_ids"].get<std::vector<int32_t>>();
    const auto ref_logits = c["first_logits"].get<std::vector<double>>();
    const auto ref_ids = c["greedy_ids"].get<std::vector<int32_t>>();
    const auto margins = c["top1_margins"].get<std::vector<double>>();

    KvSequence seq;
    const auto logits = prefill(gen.model(), prompt, seq, gen.cache(), gen.workspace());
    gen.cache().free(seq);
    ASSERT_EQ(logits.size(), ref_logits.size()) << name;
    float err = 0;
    for (size_t i = 0; i < logits.size(); ++i)
      err = std::max(err, float(std::fabs(double(logits[i]) - ref_logits[i])));
    worst = std::max(worst, err);
    EXPECT_LE(err, t.tol) << name << ": first-step logits off by " << err;

    GenerateOptions opt;
    opt.max_tokens = int(ref_ids.size());
    opt.stop_at_eos = false;
    const auto r = gen.generate(prompt, opt);
    size_t compared = 0;
    for (size_t i = 0; i < ref_ids.size(); ++i) {
      ASSERT_EQ(r.output_ids[i], ref_ids[i])
          << name << ": greedy token " << i << " differs (margin " << margins[i] << ")";
      ++compared;
      if (margins[i] < 2.0 * t.tol) break;  // the next steps may follow another path
    }
    std::printf("  %-28s max |logit err| %.2e, greedy tokens equal for %zu of %zu steps\n",
                name.c_str(), double(err), compared, ref_ids.size());
  }
  std::printf("  worst first-step logit error with %s KV: %.3e (tolerance %.1e)\n",
              std::string(dtype_name(t.kv)).c_str(), double(worst), double(t.tol));
}

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
