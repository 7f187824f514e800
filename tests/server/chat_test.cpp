// POST /v1/chat/completions: the bundled model's chat template renders the messages,
// and the reply (plain and streamed) equals `vericache generate` on that prompt; a
// template the renderer cannot run answers 500 naming it, completions still work.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
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

const json kMessages = json::array({{{"role", "system"}, {"content", "Answer in Python."}},
                                    {{"role", "user"}, {"content", "  add two numbers  "}}});
// What the bundled template makes of kMessages.
const std::string kRendered =
    "<|begin_of_text|># system: Answer in Python.\n# user: add two numbers\n# assistant:\n";

std::string generate_text(const std::string& prompt, int max_tokens, const std::string& mode) {
  const fs::path file = fs::temp_directory_path() / ("vc-chat-prompt-" + std::to_string(::getpid()));
  std::ofstream(file, std::ios::binary) << prompt;
  const CliRun r = run_vericache("generate --json --prompt-file " + file.string() +
                                     " --max-tokens " + std::to_string(max_tokens) + " --mode " + mode,
                                 false);
  fs::remove(file);
  EXPECT_EQ(r.code, 0) << r.out;
  return json::parse(r.out)["text"].get<std::string>();
}

TEST(serve_chat, reply_equals_generate_on_the_rendered_prompt_plain_and_streamed) {
  ServerProcess server;
  for (const std::string mode : {"full", "vericache"}) {
    SCOPED_TRACE(mode);
    const std::string expected = generate_text(kRendered, 16, mode);
    json b = {{"model", "tinycode"}, {"messages", kMessages}, {"max_completion_tokens", 16},
              {"mode", mode}};
    const HttpResponse plain =
        http_request(server.port(), "POST", "/v1/chat/completions", b.dump());
    ASSERT_EQ(plain.status, 200) << plain.body;
    const json j = plain.json();
    EXPECT_EQ(j["object"], "chat.completion");
    EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
    EXPECT_EQ(j["choices"][0]["message"]["content"], expected);
    EXPECT_EQ(j["usage"]["completion_tokens"], 16);

    b["stream"] = true;
    const HttpResponse streamed =
        http_request(server.port(), "POST", "/v1/chat/completions", b.dump());
    ASSERT_EQ(streamed.status, 200);
    const std::vector<std::string> events = sse_events(streamed.body);
    ASSERT_GE(events.size(), 2u);
    EXPECT_EQ(events.back(), "[DONE]");
    std::string text;
    for (size_t i = 0; i + 1 < events.size(); ++i) {
      const json e = json::parse(events[i]);
      EXPECT_EQ(e["object"], "chat.completion.chunk");
      if (i == 0) {
        EXPECT_EQ(e["choices"][0]["delta"]["role"], "assistant");
      }
      text += e["choices"][0]["delta"].value("content", "");
    }
    EXPECT_EQ(text, expected);
  }
}

TEST(serve_chat, bad_messages_get_400_naming_the_field) {
  ServerProcess server;
  const HttpResponse r = http_request(server.port(), "POST", "/v1/chat/completions",
                                      json{{"messages", json::array({{{"content", "x"}}})}}.dump());
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.json()["error"]["param"], "messages[0].role");
  const HttpResponse none = http_request(server.port(), "POST", "/v1/chat/completions",
                                         json{{"max_tokens", 3}}.dump());
  EXPECT_EQ(none.status, 400);
  EXPECT_EQ(none.json()["error"]["param"], "messages");
  // A role no template knows, a user turn without content, a tool's parameters
  // that are not a schema, a `user` id that is not a string.
  const std::vector<std::pair<json, std::string>> cases = {
      {json{{"messages", json::array({{{"role", "wizard"}, {"content", "x"}}})}}, "messages[0].role"},
      {json{{"messages", json::array({{{"role", "user"}}})}}, "messages[0].content"},
      {json{{"messages", json::array({{{"role", "user"}, {"content", nullptr}}})}}, "messages[0].content"},
      {json{{"messages", json::array({{{"role", "user"}, {"content", "x"}}})},
            {"tools", json::array({{{"type", "function"},
                                    {"function", {{"name", "f"}, {"parameters", "notobj"}}}}})}},
       "tools[0].function.parameters"},
      {json{{"messages", json::array({{{"role", "user"}, {"content", "x"}}})}, {"user", 5}}, "user"},
  };
  for (const auto& [body, param] : cases) {
    const HttpResponse r2 = http_request(server.port(), "POST", "/v1/chat/completions", body.dump());
    EXPECT_EQ(r2.status, 400) << body;
    EXPECT_EQ(r2.json()["error"]["param"], param) << r2.body;
  }
  // An assistant turn may be its tool calls alone; a plain string `user` is fine.
  const json ok = {{"max_tokens", 2},
                   {"user", "u-1"},
                   {"messages", json::array({{{"role", "user"}, {"content", "hi"}},
                                             {{"role", "assistant"}, {"content", nullptr}},
                                             {{"role", "user"}, {"content", "again"}}})}};
  const HttpResponse fine = http_request(server.port(), "POST", "/v1/chat/completions", ok.dump());
  EXPECT_EQ(fine.status, 200) << fine.body;
}

TEST(serve_chat, a_template_it_cannot_render_gets_500_and_completions_still_work) {
  const ModelWithTemplate model("unrenderable", "{% block turn %}{{ m.content }}{% endblock %}");
  ServerProcess server(model.serve_args());
  const HttpResponse r = http_request(server.port(), "POST", "/v1/chat/completions",
                                      json{{"messages", kMessages}, {"max_tokens", 3}}.dump());
  EXPECT_EQ(r.status, 500);
  EXPECT_EQ(r.json()["error"]["code"], "chat_template_unsupported");
  EXPECT_NE(r.json()["error"]["message"].get<std::string>().find("'block' is not supported"),
            std::string::npos)
      << r.body;
  EXPECT_EQ(http_request(server.port(), "POST", "/v1/completions",
                         json{{"prompt", "x"}, {"max_tokens", 2}}.dump())
                .status,
            200);
}

}  // namespace
}  // namespace vc::test
