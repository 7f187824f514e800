// The official OpenAI client for Node (npm `openai`, installed by tools/setup.sh into
// tests/server/node) against `vericache serve`: completions and chat, plain and
// streamed, equal `vericache generate`; log-probabilities with alternatives come back
// in the shapes its types declare; its error classes see our statuses.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/cli/cli_support.hpp"
#include "tests/server/server_support.hpp"

namespace vc::test {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const fs::path kNodeDir = fs::path(VC_SOURCE_DIR) / "tests/server/node";

std::string run_capture(const std::string& cmd, int* status) {
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  if (p == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  *status = pclose(p);
  return out;
}

std::string generate_text(const std::string& prompt, const std::string& args) {
  const fs::path file = fs::temp_directory_path() / ("vc-node-prompt-" + std::to_string(::getpid()));
  std::ofstream(file, std::ios::binary) << prompt;
  const CliRun r = run_vericache("generate --json --prompt-file " + file.string() + " " + args, false);
  fs::remove(file);
  EXPECT_EQ(r.code, 0) << r.out;
  return json::parse(r.out)["text"].get<std::string>();
}

TEST(serve_openai_node, the_official_client_gets_what_generate_gives) {
  if (std::system("command -v node >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "node is not installed; tools/setup.sh installs the npm 'openai' client when "
                    "node and npm are present";
  if (!fs::exists(kNodeDir / "node_modules/openai/package.json"))
    GTEST_SKIP() << "the npm package 'openai' is not installed in " << kNodeDir.string()
                 << " (tools/setup.sh runs npm install there; it needs the npm registry)";
  ServerProcess server({"--api-key", "test-key"});
  int status = 0;
  const std::string out = run_capture("node " + (kNodeDir / "openai_client.js").string() +
                                          " http://127.0.0.1:" + std::to_string(server.port()) +
                                          "/v1 test-key",
                                      &status);
  ASSERT_EQ(status, 0) << out;
  const json r = json::parse(out);
  EXPECT_EQ(r["models"], json::array({"tinycode"}));

  const std::string completion = generate_text(
      "<|begin_of_text|>def fibonacci(n):",
      "--max-tokens 20 --mode vericache --compressor snapkv --ratio 4 --draft 8");
  EXPECT_EQ(r["completion"]["text"], completion);
  EXPECT_EQ(r["completion"]["usage"]["completion_tokens"], 20);
  EXPECT_EQ(r["completion"]["vericache"]["mode"], "vericache");
  EXPECT_EQ(r["completion_stream"]["text"], completion);
  EXPECT_EQ(r["completion_stream"]["usage"]["completion_tokens"], 20);

  const std::string chat = generate_text(
      "<|begin_of_text|># user: add two numbers\n# assistant:\n", "--max-tokens 12 --mode vericache");
  EXPECT_EQ(r["chat"]["text"], chat);
  EXPECT_EQ(r["chat_stream"]["text"], chat);

  const json& lc = r["completion_logprobs"];
  EXPECT_EQ(lc["tokens"].size(), 6u);
  EXPECT_EQ(lc["token_logprobs"].size(), 6u);
  EXPECT_EQ(lc["text_offset"][0], 0);
  for (const json& n : lc["top_sizes"]) {
    EXPECT_GE(n.get<int>(), 1);
    EXPECT_LE(n.get<int>(), 2);
  }
  const json& content = r["chat_logprobs"];
  ASSERT_EQ(content.size(), 6u);
  for (const json& c : content) {
    EXPECT_TRUE(c["token"].is_string());
    EXPECT_TRUE(c["logprob"].is_number());
    EXPECT_TRUE(c["bytes"].is_array());
    ASSERT_EQ(c["top_logprobs"].size(), 2u);
    EXPECT_GE(c["top_logprobs"][0]["logprob"].get<double>(),
              c["top_logprobs"][1]["logprob"].get<double>());
  }
  EXPECT_EQ(r["chat_stream_logprobs"], content) << "the chunks add up to the plain reply";

  EXPECT_EQ(r["bad_key"]["status"], 401);
  EXPECT_EQ(r["bad_key"]["code"], "invalid_api_key");
  EXPECT_EQ(r["bad_request"]["status"], 400);
  EXPECT_EQ(r["bad_request"]["param"], "max_tokens");
}

}  // namespace
}  // namespace vc::test
