// Tool calls out of a reply's text (tool_calls.hpp).
#include "tools/server/tool_calls.hpp"

#include <algorithm>
#include <string_view>

#include <nlohmann/json.hpp>

namespace vc::server {

namespace {

using ordered = nlohmann::ordered_json;

constexpr std::string_view kSpace = " \t\n\r\f\v";
constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";

bool blank(std::string_view s) { return s.find_first_not_of(kSpace) == std::string_view::npos; }

std::string_view trimmed(std::string_view s) {
  const size_t b = s.find_first_not_of(kSpace);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(kSpace) - b + 1);
}

// Length of the longest suffix of `s` that is a proper prefix of `tag`.
size_t tag_prefix_tail(std::string_view s, std::string_view tag) {
  for (size_t k = std::min(tag.size() - 1, s.size()); k > 0; --k)
    if (s.substr(s.size() - k) == tag.substr(0, k)) return k;
  return 0;
}

// One call's JSON: {"name": one of `tools`, "arguments" or "parameters": an object,
// or a string holding one}; nullopt for anything else.
std::optional<ToolCall> call_from_json(std::string_view text, const std::vector<std::string>& tools) {
  ordered j;
  try {
    j = ordered::parse(text);
  } catch (const ordered::exception&) {
    return std::nullopt;
  }
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return std::nullopt;
  ToolCall call{j["name"].get<std::string>(), "{}"};
  if (std::find(tools.begin(), tools.end(), call.name) == tools.end()) return std::nullopt;
  const char* key = j.contains("arguments") ? "arguments" : "parameters";
  if (j.contains(key)) {
    ordered args = j[key];
    if (args.is_string()) {
      try {
        args = ordered::parse(args.get<std::string>());
      } catch (const ordered::exception&) {
        return std::nullopt;
      }
    }
    if (!args.is_object()) return std::nullopt;
    call.arguments = args.dump(-1, ' ', false, ordered::error_handler_t::replace);
  }
  return call;
}

// End (one past the closing brace) of the JSON object that starts at s[0] == '{',
// npos when it does not close.
size_t object_end(std::string_view s) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{') {
      ++depth;
    } else if (c == '}' && --depth == 0) {
      return i + 1;
    }
  }
  return std::string_view::npos;
}

ParsedReply parse_hermes(const std::string& text, const std::vector<std::string>& tools) {
  ParsedReply out;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t open = text.find(kHermesOpen, pos);
    if (open == std::string::npos) break;
    const size_t body = open + kHermesOpen.size();
    const size_t close = text.find(kHermesClose, body);
    // An unclosed last call (the model stopped right after its JSON) still counts.
    const size_t body_end = close == std::string::npos ? text.size() : close;
    const size_t end = close == std::string::npos ? text.size() : close + kHermesClose.size();
    out.content += text.substr(pos, open - pos);
    if (auto call = call_from_json(trimmed(std::string_view(text).substr(body, body_end - body)), tools)) {
      out.calls.push_back(std::move(*call));
      pos = std::min(text.size(), text.find_first_not_of(kSpace, end));
    } else {
      out.content += text.substr(open, end - open);
      pos = end;
    }
  }
  if (pos < text.size()) out.content += text.substr(pos);
  return out;
}

ParsedReply parse_llama3_json(const std::string& text, const std::vector<std::string>& tools) {
  ParsedReply out;
  std::string_view rest = trimmed(text);
  if (rest.starts_with(kPythonTag)) rest = trimmed(rest.substr(kPythonTag.size()));
  while (!rest.empty()) {
    if (rest[0] != '{') return {text, {}};
    const size_t end = object_end(rest);
    if (end == std::string_view::npos) return {text, {}};
    auto call = call_from_json(rest.substr(0, end), tools);
    if (!call) return {text, {}};
    out.calls.push_back(std::move(*call));
    rest = trimmed(rest.substr(end));
    if (!rest.empty()) {
      if (rest[0] != ';') return {text, {}};
      rest = trimmed(rest.substr(1));
    }
  }
  if (out.calls.empty()) return {text, {}};
  return out;
}

}  // namespace

std::optional<ToolCallParser> tool_call_parser_named(const std::string& name) {
  if (name == "none") return ToolCallParser::none;
  if (name == "hermes") return ToolCallParser::hermes;
  if (name == "llama3_json") return ToolCallParser::llama3_json;
  return std::nullopt;
}

std::string tool_call_parser_name(ToolCallParser p) {
  switch (p) {
    case ToolCallParser::hermes: return "hermes";
    case ToolCallParser::llama3_json: return "llama3_json";
    case ToolCallParser::none: break;
  }
  return "none";
}

ToolCallParser detect_tool_call_parser(const std::string& source) {
  if (source.find(kHermesOpen) != std::string::npos) return ToolCallParser::hermes;
  if (source.find(kPythonTag) != std::string::npos) return ToolCallParser::llama3_json;
  if (source.find("<|start_header_id|>") != std::string::npos &&
      source.find("\"parameters\"") != std::string::npos)
    return ToolCallParser::llama3_json;
  return ToolCallParser::none;
}

ParsedReply parse_tool_calls(ToolCallParser parser, const std::string& text,
                             const std::vector<std::string>& tool_names) {
  ParsedReply out;
  switch (parser) {
    case ToolCallParser::hermes: out = parse_hermes(text, tool_names); break;
    case ToolCallParser::llama3_json: out = parse_llama3_json(text, tool_names); break;
    case ToolCallParser::none: out.content = text; break;
  }
  if (out.calls.empty()) out.content = text;
  return out;
}

std::string ToolCallGate::push(const std::string& delta) {
  text_ += delta;
  if (holding_ || parser_ == ToolCallParser::none) {
    if (parser_ != ToolCallParser::none) return "";
    sent_ += delta;
    return delta;
  }
  std::string_view pending = std::string_view(text_).substr(sent_.size());
  if (parser_ == ToolCallParser::llama3_json) {
    // Only a reply that begins with a call is one: decided by its first non-blank text.
    const std::string_view head = trimmed(text_);
    if (head.empty()) return "";
    if (head[0] == '{' || head.starts_with(kPythonTag)) {
      holding_ = true;
      return "";
    }
    if (kPythonTag.starts_with(head) && head.size() < kPythonTag.size()) return "";
    parser_ = ToolCallParser::none;  // plain text: all of it goes out from now on
    sent_ = text_;
    return std::string(pending);
  }
  size_t out = pending.size();
  if (const size_t open = pending.find(kHermesOpen); open != std::string_view::npos) {
    holding_ = true;
    out = open;
  } else {
    out -= tag_prefix_tail(pending, kHermesOpen);
  }
  // Leading whitespace waits: with calls after it, the content is none.
  if (sent_.empty() && blank(pending.substr(0, out))) return "";
  std::string r(pending.substr(0, out));
  sent_ += r;
  return r;
}

}  // namespace vc::server
