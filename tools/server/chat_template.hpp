// A model's chat template: OpenAI chat messages -> the prompt text the model was
// trained on. Errors (a template it cannot render, malformed messages) are ApiErrors.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace vc::server {

class ChatTemplate {
 public:
  virtual ~ChatTemplate() = default;
  /// The prompt for `messages` (an array of {"role", "content"}), ending with the
  /// assistant's generation prompt.
  [[nodiscard]] virtual std::string render(const nlohmann::json& messages) const = 0;
};

}  // namespace vc::server
