// Parsed tool calls in OpenAI's shapes (openai_response.hpp), on strings: the plain
// chat message (`tool_calls`, `content` null when blank, finish_reason "tool_calls"),
// and a streamed reply cut into pieces at every byte, through the gate and the last
// chunks: its text deltas add up to the plain content and its `delta.tool_calls`
// carry index, id, type, name and arguments.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/server/openai_response.hpp"
#include "tools/server/tool_calls.hpp"

namespace vc::server {
namespace {

using ordered = nlohmann::ordered_json;

const std::vector<std::string> kTools = {"get_weather", "get_time"};
const std::string kCalls =
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>\n"
    "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";

ResponseMeta chat_meta() {
  ResponseMeta m;
  m.id = "chatcmpl-1";
  m.model = "tinycode";
  m.endpoint = Endpoint::chat;
  return m;
}

ordered message_for(const std::string& text, const std::string& engine_finish, std::string* finish) {
  vericache::Result r;
  r.ok = true;
  r.text = text;
  r.finish_reason = engine_finish;
  const ParsedReply parsed = parse_tool_calls(ToolCallParser::hermes, text, kTools);
  const ordered body = response_body(chat_meta(), ParsedRequest{}, r,
                                     [](const std::vector<int32_t>&) { return std::string(); }, &parsed);
  *finish = body["choices"][0]["finish_reason"];
  return body["choices"][0]["message"];
}

TEST(tool_calls_response, calls_become_tool_calls_with_null_content_and_finish_reason_tool_calls) {
  std::string finish;
  const ordered m = message_for(kCalls, "eos", &finish);
  EXPECT_EQ(finish, "tool_calls");
  EXPECT_TRUE(m["content"].is_null());
  ASSERT_EQ(m["tool_calls"].size(), 2u);
  const ordered& c = m["tool_calls"][0];
  EXPECT_EQ(c.size(), 3u);  // id, type, function: no index outside a stream
  EXPECT_TRUE(c["id"].get<std::string>().starts_with("call_"));
  EXPECT_EQ(c["id"].get<std::string>().size(), 5u + 24u);
  EXPECT_NE(c["id"], m["tool_calls"][1]["id"]);
  EXPECT_EQ(c["type"], "function");
  EXPECT_EQ(c["function"]["name"], "get_weather");
  EXPECT_EQ(c["function"]["arguments"], R"({"city":"Oslo"})");
  EXPECT_EQ(m["tool_calls"][1]["function"]["arguments"], "{}");
}

TEST(tool_calls_response, text_outside_the_calls_stays_content_and_no_calls_is_the_old_reply) {
  std::string finish;
  const ordered m = message_for("Checking both.\n" + kCalls, "length", &finish);
  EXPECT_EQ(m["content"], "Checking both.\n");
  EXPECT_EQ(finish, "tool_calls");
  const ordered plain = message_for("no calls here", "eos", &finish);
  EXPECT_EQ(plain, ordered({{"role", "assistant"}, {"content", "no calls here"}}));
  EXPECT_EQ(finish, "stop");
}

// Streams `text` through the gate in pieces of `step` bytes, then the last chunks.
std::vector<ordered> stream_of(ToolCallParser p, const std::string& text, size_t step,
                               const std::string& finish) {
  const ResponseMeta meta = chat_meta();
  ToolCallGate gate(p);
  std::vector<ordered> chunks;
  bool first = true;
  for (size_t i = 0; i < text.size(); i += step) {
    const std::string out = gate.push(text.substr(i, step));
    if (out.empty()) continue;
    chunks.push_back(chunk_body(meta, out, "", first));
    first = false;
  }
  for (ordered& c : final_tool_call_chunks(meta, parse_tool_calls(p, text, kTools), gate.sent(),
                                           finish, first))
    chunks.push_back(std::move(c));
  return chunks;
}

TEST(tool_calls_response, a_stream_adds_up_to_the_plain_reply_however_it_is_cut) {
  const std::vector<std::pair<ToolCallParser, std::string>> replies = {
      {ToolCallParser::hermes, kCalls},
      {ToolCallParser::hermes, "Checking < both.\n" + kCalls + "\n"},
      {ToolCallParser::hermes, "  \n" + kCalls},
      {ToolCallParser::hermes, "<tool_call>{\"name\": \"rm\", \"arguments\": {}}</tool_call> nope"},
      {ToolCallParser::hermes, "plain text"},
      {ToolCallParser::llama3_json, "<|python_tag|>{\"name\": \"get_time\", \"parameters\": {}}"},
      {ToolCallParser::llama3_json, " {\"name\": \"get_time\", \"parameters\": {\"zone\": \"UTC\"}}; "
                                    "{\"name\": \"get_weather\", \"parameters\": {}}"},
      {ToolCallParser::llama3_json, "{\"name\": \"get_time\", \"parameters\": {}} trailing"},
      {ToolCallParser::llama3_json, "\n# code"},
  };
  for (const auto& [parser, text] : replies) {
    const ParsedReply parsed = parse_tool_calls(parser, text, kTools);
    for (size_t step : {1, 3, 7, 1000}) {
      SCOPED_TRACE(text + " / step " + std::to_string(step));
      const std::vector<ordered> chunks = stream_of(parser, text, step, "stop");
      std::string content, finish;
      ordered calls = ordered::array();
      for (size_t i = 0; i < chunks.size(); ++i) {
        const ordered& c = chunks[i]["choices"][0];
        EXPECT_EQ(c["delta"].contains("role"), i == 0);
        if (c["delta"].contains("content") && c["delta"]["content"].is_string())
          content += c["delta"]["content"].get<std::string>();
        if (c["delta"].contains("tool_calls"))
          for (const ordered& t : c["delta"]["tool_calls"]) calls.push_back(t);
        if (!c["finish_reason"].is_null()) {
          EXPECT_EQ(i, chunks.size() - 1);
          finish = c["finish_reason"];
        }
      }
      const bool blank = parsed.content.find_first_not_of(" \t\n") == std::string::npos;
      EXPECT_EQ(content, parsed.calls.empty() || !blank ? parsed.content : "");
      EXPECT_EQ(finish, parsed.calls.empty() ? "stop" : "tool_calls");
      ASSERT_EQ(calls.size(), parsed.calls.size());
      for (size_t i = 0; i < calls.size(); ++i) {
        EXPECT_EQ(calls[i]["index"], i);
        EXPECT_TRUE(calls[i]["id"].get<std::string>().starts_with("call_"));
        EXPECT_EQ(calls[i]["type"], "function");
        EXPECT_EQ(calls[i]["function"]["name"], parsed.calls[i].name);
        EXPECT_EQ(calls[i]["function"]["arguments"], parsed.calls[i].arguments);
      }
    }
  }
}

}  // namespace
}  // namespace vc::server
