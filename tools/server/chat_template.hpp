// A model's chat template: OpenAI chat messages -> the prompt text the model was
// trained on, rendered from the checkpoint's own `chat_template`
// (tokenizer_config.json) with the Jinja subset of jinja.hpp, as Hugging Face
// renders it (add_generation_prompt, bos_token, eos_token, raise_exception).
#pragma once
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "tools/server/jinja.hpp"

namespace vc::server {

class ChatTemplate {
 public:
  /// Parses `source`; a template outside the supported subset is kept as the reason
  /// every render fails (so the server still serves /v1/completions).
  ChatTemplate(const std::string& source, std::string bos_token, std::string eos_token);
  /// From DIR/tokenizer_config.json; nullopt when it has no chat_template. Throws
  /// vc::Error for a malformed file.
  [[nodiscard]] static std::optional<ChatTemplate> from_model_dir(const std::string& dir);

  /// The prompt for `messages` (an array of {"role", "content", ...}; content a string,
  /// null, or a list of {"type": "text", "text"} parts; an assistant message may carry
  /// `tool_calls`, whose string `arguments` holding a JSON object are given to the
  /// template as that object, and `tool_calls: null` is dropped, as vLLM does), ending
  /// with the assistant's generation
  /// prompt. `tools` (null or a list of {"type": "function", "function": {"name", ...}})
  /// is the template's `tools` variable, as in Hugging Face's apply_chat_template; a
  /// template that does not use it ignores it. Objects keep the key order they have.
  /// Throws ApiError: 400 for malformed messages or tools or the template's own
  /// raise_exception, 500 for a template this renderer cannot run.
  [[nodiscard]] std::string render(const nlohmann::ordered_json& messages,
                                   const nlohmann::ordered_json& tools = nullptr) const;
  /// Why the template cannot be used ("" when it parsed).
  [[nodiscard]] const std::string& parse_error() const { return parse_error_; }
  /// The template's text.
  [[nodiscard]] const std::string& source() const { return source_; }

 private:
  std::shared_ptr<jinja::Template> template_;
  std::string parse_error_;
  std::string source_;
  std::string bos_, eos_;
};

}  // namespace vc::server
