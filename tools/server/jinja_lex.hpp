// Lexer of the Jinja subset (jinja.hpp): template text -> tags (text, {{ }} output,
// {% %} blocks) with their tokens, whitespace control applied (see jinja_lex.cpp).
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/server/jinja.hpp"

namespace vc::server::jinja {

struct Token {
  enum class Type { name, string, integer, number, op, end } type = Type::end;
  std::string text;
  nlohmann::ordered_json value;
};

struct Tag {
  enum class Type { text, output, block } type = Type::text;
  std::string text;            // text, or the inside of the tag
  std::vector<Token> tokens;   // output and block
  int line = 0;
};

/// Throws TemplateError "chat template line N: what".
[[noreturn]] inline void fail(int line, const std::string& what) {
  throw TemplateError("chat template line " + std::to_string(line) + ": " + what);
}

/// The template's tags in order; TemplateError on an unterminated tag or a bad token.
[[nodiscard]] std::vector<Tag> split_tags(std::string_view src);

}  // namespace vc::server::jinja
