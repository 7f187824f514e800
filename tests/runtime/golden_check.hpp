// The check against the float64 PyTorch reference of the bundled model
// (tests/data/visible.json), for any placement of the model (golden_test.cpp on the
// CPU's SIMD paths, cuda_device_test.cpp on a GPU).
//
// How it decides: first-step logits must lie within `tol` of the reference (max abs
// error reported). A logit error of at most `tol` on each of two logits can change
// their gap by at most 2*tol, so greedy tokens must equal the reference at every
// step up to the first step whose top1 margin is below 2*tol; after that step the
// reference may legitimately diverge and the comparison stops.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "runtime/generator.hpp"
#include "tests/runtime/test_support.hpp"

namespace vc::test {

struct Tolerance {
  DType kv;
  float tol;
};

inline void check_against_golden(const Tolerance& t, std::shared_ptr<const Model> model = tinycode()) {
  const auto& g = golden();
  GeneratorConfig gc;
  gc.kv_dtype = t.kv;
  gc.max_context = 2048;
  Generator gen(std::move(model), tinycode_tokenizer(), gc);
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

}  // namespace vc::test
