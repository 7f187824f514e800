// Tool-call parsing in /v1/chat/completions, end to end (the parsers themselves are
// tested on strings in tool_calls_test.cpp). The bundled model does not write tool
// calls (it does not even copy a prompt of repeated `<tool_call>` lines), and the
// server has no way to force its output, so these pin down that a request with tools
// whose reply holds no call is answered as before: the same message and finish_reason
// as with tool_choice "none" (no parsing), plain and streamed (the streamed pieces,
// text and logprobs, add up to the plain reply), for templates of both parser
// families that --tool-call-parser auto picks; and that the option is checked.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/cli/cli_support.hpp"
#include "tests/server/server_support.hpp"

namespace vc::test {
namespace {

using nlohmann::json;

const std::string kDir = std::string(VC_TEST_DATA_DIR) + "/chat_templates/";
constexpr int kTokens = 24;

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

json body(const std::string& choice, bool stream) {
  const json tools = json::parse(read(kDir + "tool_conversations.json"))["tools"];
  return {{"model", "tinycode"},
          {"messages", {{{"role", "user"}, {"content", "What is the weather in Oslo?"}}}},
          {"tools", tools},
          {"tool_choice", choice},
          {"max_tokens", kTokens},
          {"temperature", 0},
          {"mode", "full"},
          {"ignore_eos", true},
          {"logprobs", true},
          {"stream", stream}};
}

// Plain with "none" (nothing parsed), plain and streamed with "auto": the same reply.
void expect_reply_as_without_parsing(int port) {
  auto post = [&](const json& b) {
    const HttpResponse r = http_request(port, "POST", "/v1/chat/completions", b.dump());
    EXPECT_EQ(r.status, 200) << r.body;
    return r;
  };
  const json none = post(body("none", false)).json()["choices"][0];
  const json plain = post(body("auto", false)).json()["choices"][0];
  const std::string text = none["message"]["content"];
  ASSERT_EQ(text.find("<tool_call>"), std::string::npos) << text;  // no call to parse
  EXPECT_EQ(plain["message"], none["message"]);
  EXPECT_FALSE(plain["message"].contains("tool_calls"));
  EXPECT_EQ(plain["finish_reason"], "length");
  EXPECT_EQ(plain["logprobs"], none["logprobs"]);

  const std::vector<std::string> events = sse_events(post(body("auto", true)).body);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.back(), "[DONE]");
  std::string content, finish;
  json logprobs = json::array();
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    const json c = json::parse(events[i])["choices"][0];
    EXPECT_FALSE(c["delta"].contains("tool_calls")) << events[i];
    if (c["delta"].contains("content")) content += c["delta"]["content"].get<std::string>();
    if (!c["logprobs"].is_null())
      for (const json& t : c["logprobs"]["content"]) logprobs.push_back(t);
    if (!c["finish_reason"].is_null()) finish = c["finish_reason"];
  }
  EXPECT_EQ(content, text);
  EXPECT_EQ(finish, "length");
  EXPECT_EQ(logprobs, plain["logprobs"]["content"]);
}

TEST(serve_chat_tool_calls, a_reply_without_calls_is_answered_as_before_with_a_hermes_template) {
  const ModelWithTemplate model("qwen3-calls", read(kDir + "qwen3.jinja"), "", "<|im_end|>");
  ServerProcess server(model.serve_args());
  expect_reply_as_without_parsing(server.port());
}

TEST(serve_chat_tool_calls, a_reply_without_calls_is_answered_as_before_with_a_llama3_template) {
  const ModelWithTemplate model("llama31-calls", read(kDir + "llama31_tools.jinja"),
                                "<|begin_of_text|>", "<|eot_id|>");
  ServerProcess server(model.serve_args());
  expect_reply_as_without_parsing(server.port());
}

TEST(serve_chat_tool_calls, the_none_parser_answers_as_before_too) {
  const ModelWithTemplate model("qwen3-none", read(kDir + "qwen3.jinja"), "", "<|im_end|>");
  std::vector<std::string> args = model.serve_args();
  args.insert(args.end(), {"--tool-call-parser", "none"});
  ServerProcess server(args);
  expect_reply_as_without_parsing(server.port());
}

TEST(serve_chat_tool_calls, an_unknown_parser_name_is_refused_at_start) {
  const CliRun r = run_vericache("serve --port 0 --tool-call-parser mistral", true);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("error: --tool-call-parser: expected auto, hermes, llama3_json or none, "
                       "got 'mistral'"),
            std::string::npos)
      << r.out;
}

}  // namespace
}  // namespace vc::test
