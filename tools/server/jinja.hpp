// A Jinja2 subset, enough for the chat templates of Llama-3, Mistral, Qwen2 and Qwen3
// (checked against Python's jinja2 in tests/server): whitespace control ({%- -%},
// trim_blocks and lstrip_blocks as Hugging Face sets them), if/elif/else, for with
// loop.* and else, set (with namespace attributes), macros (positional and keyword
// arguments, defaults), call blocks with caller() (and caller parameters), comments,
// string and list methods, the filters and tests those templates use (select/reject,
// selectattr/rejectattr, map(attribute=) ...), raise_exception. Anything else (blocks,
// includes, an unknown filter) is an error naming it and its line, at parse time where
// possible.
#pragma once
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "kernels/error.hpp"

namespace vc::server::jinja {

struct Node;

/// A template that failed: at parse time (unsupported syntax) or while rendering
/// (raise_exception, a type error). The message names the line.
class TemplateError : public Error {
 public:
  explicit TemplateError(const std::string& what) : Error(what) {}
};

/// raise_exception(...) called by the template: the message is the template's.
class RaisedError : public TemplateError {
 public:
  explicit RaisedError(const std::string& what) : TemplateError(what) {}
};

class Template {
 public:
  /// Parses `source`; throws TemplateError.
  explicit Template(const std::string& source);
  ~Template();
  Template(Template&&) noexcept;
  /// Renders with the variables of `context` (a JSON object; its objects' key order is
  /// the order dict iteration and `tojson` see); throws TemplateError.
  [[nodiscard]] std::string render(const nlohmann::ordered_json& context) const;

 private:
  std::unique_ptr<std::vector<std::unique_ptr<Node>>> body_;
};

}  // namespace vc::server::jinja
