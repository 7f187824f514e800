// Tool calls parsed out of reply text (tools/server/tool_calls.hpp), on strings: the
// Hermes/Qwen `<tool_call>` format and the Llama-3 JSON format, the parser a template
// calls for, and the streaming gate whose output stays a prefix of the content.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tools/server/tool_calls.hpp"

namespace vc::server {
namespace {

const std::vector<std::string> kTools = {"get_weather", "get_time"};

ParsedReply hermes(const std::string& text) {
  return parse_tool_calls(ToolCallParser::hermes, text, kTools);
}
ParsedReply llama(const std::string& text) {
  return parse_tool_calls(ToolCallParser::llama3_json, text, kTools);
}

TEST(tool_calls_hermes, a_well_formed_call_becomes_name_and_arguments_text) {
  const ParsedReply r = hermes(
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": "
      "\"c\"}}\n</tool_call>");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(r.calls[0].arguments, R"({"city":"Paris","unit":"c"})");  // the model's key order
  EXPECT_EQ(r.content, "");
}

TEST(tool_calls_hermes, several_calls_come_out_in_order) {
  const ParsedReply r = hermes(
      "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\": \"UTC\"}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].name, "get_time");
  EXPECT_EQ(r.calls[0].arguments, R"({"zone":"UTC"})");
  EXPECT_EQ(r.calls[1].name, "get_weather");
  EXPECT_EQ(r.calls[1].arguments, "{}");
  EXPECT_EQ(r.content, "");
}

TEST(tool_calls_hermes, text_around_the_calls_is_the_content) {
  const ParsedReply r = hermes(
      "Let me look.\n<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>\nDone.");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.content, "Let me look.\nDone.");
}

TEST(tool_calls_hermes, malformed_json_stays_text_and_the_good_call_is_still_taken) {
  const std::string bad = "<tool_call>{\"name\": \"get_time\", \"arguments\": {</tool_call>";
  const ParsedReply r =
      hermes(bad + "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}</tool_call>");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(r.content, bad);
  const ParsedReply only_bad = hermes(bad);
  EXPECT_TRUE(only_bad.calls.empty());
  EXPECT_EQ(only_bad.content, bad);
}

TEST(tool_calls_hermes, a_function_not_among_the_tools_stays_text) {
  const std::string text = "<tool_call>{\"name\": \"rm_rf\", \"arguments\": {}}</tool_call>";
  const ParsedReply r = hermes(text);
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(r.content, text);
}

TEST(tool_calls_hermes, arguments_that_are_not_an_object_stay_text) {
  for (const std::string args : {"[1, 2]", "\"not json\"", "3"}) {
    const std::string text =
        "<tool_call>{\"name\": \"get_time\", \"arguments\": " + args + "}</tool_call>";
    EXPECT_TRUE(hermes(text).calls.empty()) << args;
  }
  // A string holding an object is that object.
  const ParsedReply r =
      hermes(R"(<tool_call>{"name": "get_time", "arguments": "{\"zone\": \"CET\"}"}</tool_call>)");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, R"({"zone":"CET"})");
}

TEST(tool_calls_hermes, an_unclosed_last_call_counts_when_its_json_is_whole) {
  const ParsedReply whole = hermes("<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n");
  ASSERT_EQ(whole.calls.size(), 1u);
  const ParsedReply cut = hermes("<tool_call>\n{\"name\": \"get_time\", \"argu");
  EXPECT_TRUE(cut.calls.empty());
  EXPECT_EQ(cut.content, "<tool_call>\n{\"name\": \"get_time\", \"argu");
}

TEST(tool_calls_hermes, text_without_calls_is_left_as_it_is) {
  for (const std::string text : {"", "The weather is fine.", "  {\"name\": \"get_time\"}  "}) {
    const ParsedReply r = hermes(text);
    EXPECT_TRUE(r.calls.empty());
    EXPECT_EQ(r.content, text);
  }
}

TEST(tool_calls_llama3_json, the_whole_reply_as_one_call_is_parsed_with_parameters) {
  const ParsedReply r =
      llama("{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Lima\", \"days\": 3}}");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(r.calls[0].arguments, R"({"city":"Lima","days":3})");
  EXPECT_EQ(r.content, "");
}

TEST(tool_calls_llama3_json, a_python_tag_and_arguments_key_are_taken_too) {
  const ParsedReply r =
      llama("<|python_tag|>{\"name\": \"get_time\", \"arguments\": {\"zone\": \"}{\"}}\n");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, R"({"zone":"}{"})");  // braces inside strings
}

TEST(tool_calls_llama3_json, calls_joined_by_semicolons_are_several_calls) {
  const ParsedReply r = llama(
      "{\"name\": \"get_time\", \"parameters\": {}}; {\"name\": \"get_weather\", \"parameters\": "
      "{\"city\": \"Rome\"}}");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].name, "get_time");
  EXPECT_EQ(r.calls[1].name, "get_weather");
}

TEST(tool_calls_llama3_json, anything_but_calls_leaves_the_whole_reply_as_text) {
  for (const std::string text :
       {"Sure: {\"name\": \"get_time\", \"parameters\": {}}",            // text before
        "{\"name\": \"get_time\", \"parameters\": {}} and then",          // text after
        "{\"name\": \"get_time\", \"parameters\": {\"zone\": }",          // malformed
        "{\"name\": \"delete_all\", \"parameters\": {}}",                  // unknown function
        "{\"name\": \"get_time\", \"parameters\": {}}; {\"name\": \"nope\"}",  // one bad of two
        "def f(): pass", ""}) {
    const ParsedReply r = llama(text);
    EXPECT_TRUE(r.calls.empty()) << text;
    EXPECT_EQ(r.content, text);
  }
}

TEST(tool_calls_parser, none_parses_nothing) {
  const std::string text = "<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>";
  const ParsedReply r = parse_tool_calls(ToolCallParser::none, text, kTools);
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(r.content, text);
}

std::string read(const std::string& name) {
  std::ifstream in(std::string(VC_TEST_DATA_DIR) + "/chat_templates/" + name);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(tool_calls_parser, the_template_text_picks_the_parser) {
  EXPECT_EQ(detect_tool_call_parser(read("qwen3.jinja")), ToolCallParser::hermes);
  EXPECT_EQ(detect_tool_call_parser(read("llama31_tools.jinja")), ToolCallParser::llama3_json);
  EXPECT_EQ(detect_tool_call_parser(read("llama3.jinja")), ToolCallParser::none);
  EXPECT_EQ(detect_tool_call_parser(read("mistral.jinja")), ToolCallParser::none);
  EXPECT_EQ(detect_tool_call_parser("{{ '<|python_tag|>' + x }}"), ToolCallParser::llama3_json);
}

TEST(tool_calls_parser, names_map_both_ways_and_auto_is_not_a_parser) {
  for (ToolCallParser p : {ToolCallParser::none, ToolCallParser::hermes, ToolCallParser::llama3_json})
    EXPECT_EQ(tool_call_parser_named(tool_call_parser_name(p)), p);
  EXPECT_FALSE(tool_call_parser_named("auto"));
  EXPECT_FALSE(tool_call_parser_named("mistral"));
}

// Feeds `text` to a gate in pieces of `step` bytes; returns what went out.
std::string gate_out(ToolCallParser p, const std::string& text, size_t step) {
  ToolCallGate gate(p);
  std::string out;
  for (size_t i = 0; i < text.size(); i += step) out += gate.push(text.substr(i, step));
  EXPECT_EQ(out, gate.sent());
  return out;
}

TEST(tool_calls_gate, hermes_lets_out_the_text_before_a_call_and_holds_the_call) {
  const std::string text =
      "Checking.\n<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>\nok";
  for (size_t step : {1, 2, 5, 100}) {
    SCOPED_TRACE(step);
    const std::string out = gate_out(ToolCallParser::hermes, text, step);
    EXPECT_EQ(out, "Checking.\n");
    EXPECT_TRUE(hermes(text).content.starts_with(out));
  }
}

TEST(tool_calls_gate, hermes_lets_out_all_of_a_reply_without_calls_but_a_possible_tag_start) {
  EXPECT_EQ(gate_out(ToolCallParser::hermes, "x < y and <tool", 1), "x < y and ");
  EXPECT_EQ(gate_out(ToolCallParser::hermes, "plain text", 3), "plain text");
  // Leading whitespace waits (the content is null when calls follow it).
  EXPECT_EQ(gate_out(ToolCallParser::hermes, "\n\n", 1), "");
  EXPECT_EQ(gate_out(ToolCallParser::hermes, "\n\nhi", 1), "\n\nhi");
}

TEST(tool_calls_gate, llama3_json_holds_a_reply_that_begins_like_a_call) {
  EXPECT_EQ(gate_out(ToolCallParser::llama3_json, " {\"name\": \"get_time\"", 1), "");
  EXPECT_EQ(gate_out(ToolCallParser::llama3_json, "<|python_tag|>{", 2), "");
  EXPECT_EQ(gate_out(ToolCallParser::llama3_json, "<|py", 1), "");
  EXPECT_EQ(gate_out(ToolCallParser::llama3_json, "  Hello {x}", 1), "  Hello {x}");
  EXPECT_EQ(gate_out(ToolCallParser::llama3_json, "<b>bold</b>", 1), "<b>bold</b>");
}

TEST(tool_calls_gate, none_lets_everything_out) {
  EXPECT_EQ(gate_out(ToolCallParser::none, "<tool_call>{", 1), "<tool_call>{");
}

}  // namespace
}  // namespace vc::server
