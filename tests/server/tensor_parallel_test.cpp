// `vericache serve --tp N`: the engine's ranks behind the HTTP front end give the
// text `vericache generate --tp N` gives with the same options, and a degree that
// does not split the model is one error line before listening.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "tests/cli/generate_json.hpp"
#include "tests/server/server_support.hpp"

namespace vc::test {
namespace {

using nlohmann::json;

const std::string kPrompt = "<|begin_of_text|>def fibonacci(n):";

TEST(serve_tensor_parallel, completions_at_degree_two_equal_generate_at_degree_two) {
  ServerProcess server({"--tp", "2"});
  struct Case {
    const char* mode;
    const char* sampling;  // generate's options
    json fields;           // the same as request fields
  };
  const Case cases[] = {
      {"full", "", json::object()},
      {"vericache", "", json::object()},
      {"vericache", " --temperature 0.8 --seed 7", {{"temperature", 0.8}, {"seed", 7}}},
  };
  for (const Case& c : cases) {
    const json expected = generate_json(std::string("--json --tp 2 --mode ") + c.mode +
                                        " --compressor snapkv --ratio 4 --draft 6 --ignore-eos "
                                        "--max-tokens 24 --prompt '" + kPrompt + "'" + c.sampling);
    json b = {{"prompt", kPrompt}, {"max_tokens", 24}, {"mode", c.mode}, {"compressor", "snapkv"},
              {"ratio", 4}, {"draft", 6}, {"ignore_eos", true}};
    b.update(c.fields);
    const HttpResponse r = http_request(server.port(), "POST", "/v1/completions", b.dump());
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.json()["choices"][0]["text"], expected["text"]) << c.mode << c.sampling;
  }
}

TEST(serve_tensor_parallel, a_degree_that_does_not_split_the_model_is_one_error_line) {
  const CliRun r = run_vericache("serve --port 0 --tp 3", /*merge_err=*/true);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("degree 3"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace vc::test
