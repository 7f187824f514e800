// `vericache generate ... --json` from the CLI tests, and the bit-for-bit comparison
// of two runs' tokens and logprobs (the remote-cache tests' yardstick).
#pragma once
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "tests/cli/cli_support.hpp"

namespace vc::test {

/// Runs `vericache generate ARGS` (ARGS should include --json); an exit other than
/// 0 fails the test and gives an empty object.
inline nlohmann::json generate_json(const std::string& args) {
  const auto r = run_vericache("generate " + args, false);
  EXPECT_EQ(r.code, 0) << args << "\n" << r.out;
  return r.code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json::object();
}

/// The same output ids and the same logprobs, digit for digit.
inline void expect_same_tokens(const nlohmann::json& full, const nlohmann::json& j,
                               const std::string& what) {
  EXPECT_EQ(full["output_ids"], j["output_ids"]) << what;
  EXPECT_EQ(full["output_logprobs"].dump(), j["output_logprobs"].dump()) << what;
}

}  // namespace vc::test
