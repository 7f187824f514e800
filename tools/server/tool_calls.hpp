// Tool calls out of a model's reply, as vLLM's tool parsers find them: the text the
// model wrote, in its template family's call format, becomes OpenAI `tool_calls`
// plus the text outside the calls. Two formats:
//   hermes       `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, any
//                number, text around them (Hermes, Qwen2.5, Qwen3 templates);
//   llama3_json  `{"name": ..., "parameters": {...}}` as the whole reply, optionally
//                after `<|python_tag|>`, several joined by `;` (Llama 3.1 / 3.2).
// A call naming a function that is not among the request's tools, or whose JSON (or
// arguments object) does not parse, stays text. Plain strings in and out: no model.
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace vc::server {

enum class ToolCallParser { none, hermes, llama3_json };

/// "none", "hermes", "llama3_json"; nullopt for anything else ("auto" included).
[[nodiscard]] std::optional<ToolCallParser> tool_call_parser_named(const std::string& name);
[[nodiscard]] std::string tool_call_parser_name(ToolCallParser p);

/// The parser a chat template's own text calls for: hermes when it writes
/// `<tool_call>`, llama3_json when it writes `<|python_tag|>` or is a Llama-3 header
/// template that asks for `"parameters"`, none otherwise.
[[nodiscard]] ToolCallParser detect_tool_call_parser(const std::string& template_source);

struct ToolCall {
  std::string name;
  std::string arguments;  ///< a JSON object as text (compact, the model's key order)
};

struct ParsedReply {
  /// The text outside the calls (whitespace right after a call dropped with it); the
  /// whole text when there are no calls.
  std::string content;
  std::vector<ToolCall> calls;
};

/// Finds the calls in `text`; `tool_names` are the functions the request offered.
[[nodiscard]] ParsedReply parse_tool_calls(ToolCallParser parser, const std::string& text,
                                           const std::vector<std::string>& tool_names);

/// For a streamed reply with tools: lets out text that cannot belong to a call and
/// holds back the rest (hermes: from the first `<tool_call>`, or a tail that may begin
/// one; llama3_json: everything once the reply begins with `{` or `<|python_tag|>`;
/// both: leading whitespace), so that what went out is always a prefix of the parsed
/// reply's content.
class ToolCallGate {
 public:
  explicit ToolCallGate(ToolCallParser parser) : parser_(parser) {}
  /// Text `delta` arrived; returns what may go out now.
  [[nodiscard]] std::string push(const std::string& delta);
  /// Everything pushed so far.
  [[nodiscard]] const std::string& text() const { return text_; }
  /// Everything let out so far.
  [[nodiscard]] const std::string& sent() const { return sent_; }

 private:
  ToolCallParser parser_;
  std::string text_, sent_;
  bool holding_ = false;  ///< a call may have begun: nothing more goes out
};

}  // namespace vc::server
