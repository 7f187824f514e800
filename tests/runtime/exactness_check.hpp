// The exactness contract's comparison (DESIGN.md): two runs emitted the same token
// ids and log-probabilities equal in every bit.
#pragma once
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "runtime/generator.hpp"

namespace vc::test {

inline void expect_identical(const GenerateResult& full, const GenerateResult& r, const std::string& what) {
  ASSERT_EQ(full.output_ids, r.output_ids) << what;
  ASSERT_EQ(full.output_logprobs.size(), r.output_logprobs.size()) << what;
  EXPECT_EQ(0, std::memcmp(full.output_logprobs.data(), r.output_logprobs.data(),
                           full.output_logprobs.size() * sizeof(float)))
      << what << ": logprobs differ in some bit";
}

}  // namespace vc::test
