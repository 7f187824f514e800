// Chat templates from tokenizer_config.json (chat_template.hpp).
#include "tools/server/chat_template.hpp"

#include <filesystem>

#include "runtime/model/bounded_input.hpp"
#include "tools/server/api_error.hpp"

namespace vc::server {

namespace {

using nlohmann::json;

// A special token in tokenizer_config.json: a string, or {"content": ...}, or null.
std::string token_text(const json& cfg, const char* key) {
  if (!cfg.contains(key) || cfg[key].is_null()) return "";
  const json& v = cfg[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string())
    return v["content"].get<std::string>();
  throw Error(std::string("tokenizer_config.json: field '") + key +
              "': expected a string or an object with 'content'");
}

using ordered = nlohmann::ordered_json;

std::string where_in(const std::string& base, size_t i) { return base + "[" + std::to_string(i) + "]"; }

// An assistant message's tool calls: {"type": "function", "function": {"name",
// "arguments"}} (and an optional id); arguments given as a JSON object's text become
// that object.
ordered normalized_tool_calls(const ordered& calls, const std::string& where) {
  if (!calls.is_array()) throw bad_request(where, "expected a list of tool calls");
  ordered out = ordered::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    const std::string at = where_in(where, i);
    const ordered& c = calls[i];
    if (!c.is_object() || !c.contains("function") || !c["function"].is_object())
      throw bad_request(at, "expected {\"type\": \"function\", \"function\": {\"name\", \"arguments\"}}");
    if (c.contains("type") && c["type"] != "function")
      throw bad_request(at + ".type", "only \"function\" tool calls are supported");
    const ordered& f = c["function"];
    if (!f.contains("name") || !f["name"].is_string())
      throw bad_request(at + ".function.name", "expected a string");
    ordered n = c;
    if (f.contains("arguments") && f["arguments"].is_string()) {
      const std::string& text = f["arguments"].get_ref<const std::string&>();
      // Depth-bounded like the body itself; text that is no JSON object stays a string.
      if (json_nesting_depth(text, 64) <= 64) {
        ordered parsed = ordered::parse(text, nullptr, false);
        if (parsed.is_object()) n["function"]["arguments"] = std::move(parsed);
      }
    } else if (f.contains("arguments") && !f["arguments"].is_object()) {
      throw bad_request(at + ".function.arguments", "expected a string of JSON or an object");
    }
    out.push_back(std::move(n));
  }
  return out;
}

// Messages as the template sees them: content parts joined into one string.
ordered normalized(const ordered& messages) {
  if (!messages.is_array() || messages.empty())
    throw bad_request("messages", "expected a non-empty array of messages");
  ordered out = ordered::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string where = where_in("messages", i);
    const ordered& m = messages[i];
    if (!m.is_object()) throw bad_request(where, "expected an object with 'role' and 'content'");
    if (!m.contains("role") || !m["role"].is_string())
      throw bad_request(where + ".role", "expected a string");
    const std::string role = m["role"].get<std::string>();
    if (role != "system" && role != "developer" && role != "user" && role != "assistant" &&
        role != "tool")
      throw bad_request(where + ".role", "expected one of system, developer, user, assistant, tool; got '" +
                                             role.substr(0, 40) + "'");
    ordered n = m;
    if (!m.contains("content") || m["content"].is_null()) {
      // Only an assistant's turn may be its tool calls alone.
      if (role != "assistant")
        throw bad_request(where + ".content", "required for a " + role + " message");
      n["content"] = nullptr;
    } else if (m["content"].is_array()) {
      std::string text;
      for (const ordered& part : m["content"]) {
        if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
            !part["text"].is_string())
          throw bad_request(where + ".content",
                            "only text parts ({\"type\": \"text\", \"text\": ...}) are supported");
        text += part["text"].get<std::string>();
      }
      n["content"] = text;
    } else if (!m["content"].is_string()) {
      throw bad_request(where + ".content", "expected a string or a list of text parts");
    }
    if (m.contains("tool_calls") && m["tool_calls"].is_null()) {
      n.erase("tool_calls");  // as vLLM does: a client's "tool_calls": null is no calls
    } else if (m.contains("tool_calls")) {
      if (m["role"] != "assistant")
        throw bad_request(where + ".tool_calls", "only assistant messages carry tool calls");
      n["tool_calls"] = normalized_tool_calls(m["tool_calls"], where + ".tool_calls");
    }
    out.push_back(std::move(n));
  }
  return out;
}

// The request's tools: null, or a list of {"type": "function", "function": {"name", ...}}.
ordered checked_tools(const ordered& tools) {
  if (tools.is_null()) return tools;
  if (!tools.is_array()) throw bad_request("tools", "expected a list of tools");
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string at = where_in("tools", i);
    const ordered& t = tools[i];
    if (!t.is_object() || t.value("type", "") != "function" || !t.contains("function") ||
        !t["function"].is_object())
      throw bad_request(at, "expected {\"type\": \"function\", \"function\": {\"name\", ...}}");
    if (!t["function"].contains("name") || !t["function"]["name"].is_string())
      throw bad_request(at + ".function.name", "expected a string");
    if (t["function"].contains("parameters") && !t["function"]["parameters"].is_object() &&
        !t["function"]["parameters"].is_null())
      throw bad_request(at + ".function.parameters", "expected a JSON Schema object");
  }
  return tools;
}

}  // namespace

ChatTemplate::ChatTemplate(const std::string& source, std::string bos_token, std::string eos_token)
    : source_(source), bos_(std::move(bos_token)), eos_(std::move(eos_token)) {
  try {
    template_ = std::make_shared<jinja::Template>(source);
  } catch (const jinja::TemplateError& e) {
    parse_error_ = e.what();
  }
}

std::optional<ChatTemplate> ChatTemplate::from_model_dir(const std::string& dir) {
  const auto path = std::filesystem::path(dir) / "tokenizer_config.json";
  if (!std::filesystem::exists(path)) return std::nullopt;
  const json cfg = parse_json_bounded(read_file_bounded(path, size_t(16) << 20, path.string()),
                                      path.string());
  if (!cfg.is_object() || !cfg.contains("chat_template") || cfg["chat_template"].is_null())
    return std::nullopt;
  const json& t = cfg["chat_template"];
  std::string source;
  if (t.is_string()) {
    source = t.get<std::string>();
  } else if (t.is_array()) {  // named templates: the "default" one
    for (size_t i = 0; i < t.size(); ++i) {
      const json& named = t[i];
      const std::string field = "field 'chat_template[" + std::to_string(i) + "]";
      if (!named.is_object() || !named.contains("name") || !named["name"].is_string() ||
          !named.contains("template") || !named["template"].is_string())
        throw Error(path.string() + ": " + field + "': expected an object with a string \"name\" and a "
                    "string \"template\", found " + named.dump(-1, ' ', true).substr(0, 80));
      if (named["name"] == "default") source = named["template"].get<std::string>();
    }
    if (source.empty())
      throw Error(path.string() + ": field 'chat_template': no template named 'default'");
  } else {
    throw Error(path.string() + ": field 'chat_template': expected a string or a list");
  }
  return ChatTemplate(source, token_text(cfg, "bos_token"), token_text(cfg, "eos_token"));
}

std::string ChatTemplate::render(const ordered& messages, const ordered& tools) const {
  ordered ctx = {{"messages", normalized(messages)},
                 {"add_generation_prompt", true},
                 {"bos_token", bos_},
                 {"eos_token", eos_}};
  // Without tools it is none, as Hugging Face's apply_chat_template(tools=None) passes it.
  ctx["tools"] = checked_tools(tools);
  if (!template_)
    throw ApiError(500, "server_error",
                   "the model's chat template cannot be rendered: " + parse_error_, "",
                   "chat_template_unsupported");
  try {
    return template_->render(ctx);
  } catch (const jinja::RaisedError& e) {
    throw bad_request("messages", std::string("the chat template refused the messages: ") + e.what());
  } catch (const jinja::TemplateError& e) {
    throw ApiError(500, "server_error",
                   std::string("the model's chat template cannot be rendered: ") + e.what(), "",
                   "chat_template_unsupported");
  }
}

}  // namespace vc::server
