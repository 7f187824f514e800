// Tools in /v1/chat/completions: `tools` reach the model's chat template as Hugging
// Face's apply_chat_template passes them, tool calls and tool results in the messages
// render, in the request's own key order; the reply equals `vericache generate` on the
// prompt Python's jinja2 renders (tests/data/chat_templates/expected_tools.json). A
// template without tools ignores them; only tool_choice "auto" and "none" are taken.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/cli/generate_json.hpp"
#include "tests/server/server_support.hpp"

namespace vc::test {
namespace {

using nlohmann::json;
using ordered = nlohmann::ordered_json;
namespace fs = std::filesystem;

const std::string kDir = std::string(VC_TEST_DATA_DIR) + "/chat_templates/";

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// `generate --json` in full mode on `prompt` (read from a file, as it is), with the
// output tokens' logprobs: equal ones say the prompts were the same, token for token.
json generate_on(const std::string& prompt, int max_tokens) {
  const fs::path file = fs::temp_directory_path() / ("vc-tools-prompt-" + std::to_string(::getpid()));
  std::ofstream(file, std::ios::binary) << prompt;
  json j = generate_json("--json --mode full --ignore-eos --top-logprobs 1 --prompt-file " +
                         file.string() + " --max-tokens " + std::to_string(max_tokens));
  fs::remove(file);
  return j;
}

const ordered kData = ordered::parse(read(kDir + "tool_conversations.json"));
const json kExpected = json::parse(read(kDir + "expected_tools.json"));

// A chat body for conversation `conv` with its tools, keys in the data's order.
ordered body_of(const std::string& conv, int max_tokens) {
  const ordered& c = kData["conversations"][conv];
  ordered b = {{"model", "tinycode"}, {"messages", c["messages"]}};
  if (c["tools"].get<bool>()) b["tools"] = kData["tools"];
  b["tool_choice"] = "auto";
  b["max_tokens"] = max_tokens;
  b["mode"] = "full";
  b["ignore_eos"] = true;
  b["logprobs"] = true;
  return b;
}

TEST(serve_chat_tools, reply_equals_generate_on_jinja2s_rendering_with_tools) {
  const ModelWithTemplate model("qwen3", read(kDir + "qwen3.jinja"), "", "<|im_end|>");
  ServerProcess server(model.serve_args());
  const int kTokens = 12;
  for (const char* conv : {"tools_first_turn", "tool_call_round_trip", "arguments_as_an_object"}) {
    SCOPED_TRACE(conv);
    const std::string prompt = kExpected.at("qwen3").at(conv).at("text");
    const json ref = generate_on(prompt, kTokens);
    const HttpResponse r = http_request(server.port(), "POST", "/v1/chat/completions",
                                        body_of(conv, kTokens).dump());
    ASSERT_EQ(r.status, 200) << r.body;
    const json j = r.json();
    EXPECT_EQ(j["choices"][0]["message"]["content"], ref["text"]);
    EXPECT_EQ(j["usage"]["prompt_tokens"], ref["prompt_ids"].size());
    const json& content = j["choices"][0]["logprobs"]["content"];
    ASSERT_EQ(content.size(), size_t(kTokens));
    for (int i = 0; i < kTokens; ++i)
      EXPECT_NEAR(content[i]["logprob"].get<double>(), ref["output_logprobs"][i].get<double>(), 1e-6)
          << "token " << i;
  }
}

TEST(serve_chat_tools, a_template_without_tools_ignores_them) {
  ServerProcess server;  // the bundled model's template does not use tools
  ordered b = body_of("no_tools", 8);
  const HttpResponse plain = http_request(server.port(), "POST", "/v1/chat/completions", b.dump());
  b["tools"] = kData["tools"];
  const HttpResponse with_tools =
      http_request(server.port(), "POST", "/v1/chat/completions", b.dump());
  ASSERT_EQ(plain.status, 200) << plain.body;
  ASSERT_EQ(with_tools.status, 200) << with_tools.body;
  EXPECT_EQ(with_tools.json()["choices"][0]["message"], plain.json()["choices"][0]["message"]);
  EXPECT_EQ(with_tools.json()["usage"], plain.json()["usage"]);
}

TEST(serve_chat_tools, bad_tools_tool_choice_or_tool_calls_get_400_naming_the_field) {
  const ModelWithTemplate model("llama31", read(kDir + "llama31_tools.jinja"),
                                "<|begin_of_text|>", "<|eot_id|>");
  ServerProcess server(model.serve_args());
  auto error_of = [&](const ordered& b, const char* path = "/v1/chat/completions") {
    const HttpResponse r = http_request(server.port(), "POST", path, b.dump());
    EXPECT_EQ(r.status, 400) << r.body;
    return r.json()["error"];
  };
  ordered b = body_of("tool_call_round_trip", 4);
  b["tool_choice"] = "required";
  EXPECT_EQ(error_of(b)["param"], "tool_choice");
  b["tool_choice"] = {{"type", "function"}, {"function", {{"name", "get_weather"}}}};
  EXPECT_EQ(error_of(b)["param"], "tool_choice");
  b["tool_choice"] = "none";
  b["tools"] = {{{"type", "function"}, {"function", {{"description", "no name"}}}}};
  EXPECT_EQ(error_of(b)["param"], "tools[0].function.name");
  b = body_of("tool_call_round_trip", 4);
  b["messages"][1]["tool_calls"][0]["function"].erase("name");
  EXPECT_EQ(error_of(b)["param"], "messages[1].tool_calls[0].function.name");
  // The template's own refusal (two calls at once), with its message.
  const json refused = error_of(body_of("two_calls_at_once", 4));
  EXPECT_EQ(refused["param"], "messages");
  EXPECT_NE(refused["message"].get<std::string>().find(
                kExpected.at("llama31_tools").at("two_calls_at_once").at("error").get<std::string>()),
            std::string::npos)
      << refused;
  // tools belong to chat.
  EXPECT_EQ(error_of({{"prompt", "x"}, {"tools", kData["tools"]}}, "/v1/completions")["param"],
            "tools");
}

}  // namespace
}  // namespace vc::test
