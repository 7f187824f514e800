// Lexer of the Jinja subset (jinja_lex.hpp). Whitespace follows Hugging Face's
// chat-template environment: trim_blocks (the newline after a block or comment tag
// goes) and lstrip_blocks (spaces and tabs before a block or comment tag on its line
// go), plus explicit {%- -%} control.
#include "tools/server/jinja_lex.hpp"

#include <cctype>

namespace vc::server::jinja {

using json = nlohmann::ordered_json;

namespace {

std::vector<Token> tokenize(std::string_view s, int line) {
  std::vector<Token> out;
  size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      out.push_back({Token::Type::name, std::string(s.substr(i, j - i)), {}});
      i = j;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
      bool real = false;
      if (j + 1 < s.size() && s[j] == '.' && std::isdigit(static_cast<unsigned char>(s[j + 1]))) {
        real = true;
        ++j;
        while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
      }
      const std::string num(s.substr(i, j - i));
      out.push_back({real ? Token::Type::number : Token::Type::integer, num,
                     real ? json(std::stod(num)) : json(std::stoll(num))});
      i = j;
    } else if (c == '\'' || c == '"') {
      std::string v;
      size_t j = i + 1;
      for (; j < s.size() && s[j] != c; ++j) {
        if (s[j] == '\\' && j + 1 < s.size()) {
          const char e = s[++j];
          switch (e) {
            case 'n': v += '\n'; break;
            case 't': v += '\t'; break;
            case 'r': v += '\r'; break;
            case '\\': v += '\\'; break;
            case '\'': v += '\''; break;
            case '"': v += '"'; break;
            default: v += '\\'; v += e;
          }
        } else {
          v += s[j];
        }
      }
      if (j >= s.size()) fail(line, "unterminated string literal");
      out.push_back({Token::Type::string, v, json(v)});
      i = j + 1;
    } else {
      static const char* two[] = {"==", "!=", "<=", ">=", "//", "**"};
      std::string op(1, c);
      for (const char* t : two)
        if (s.substr(i, 2) == t) op.assign(t, 2);  // (assign: GCC 12 warns falsely on op = t)
      if (op.size() == 1 && std::string_view("()[]{}.,:|~+-*/%<>=").find(c) == std::string_view::npos)
        fail(line, std::string("unexpected character '") + c + "'");
      out.push_back({Token::Type::op, op, {}});
      i += op.size();
    }
  }
  out.push_back({Token::Type::end, "", {}});
  return out;
}

int line_of(std::string_view src, size_t pos) {
  int n = 1;
  for (size_t i = 0; i < pos && i < src.size(); ++i) n += src[i] == '\n';
  return n;
}

// Finds the end of a tag that starts at `from` (inside it), skipping strings.
size_t tag_end(std::string_view src, size_t from, std::string_view close, int line) {
  char quote = 0;
  for (size_t i = from; i < src.size(); ++i) {
    const char c = src[i];
    if (quote) {
      if (c == '\\') ++i;
      else if (c == quote) quote = 0;
    } else if (c == '\'' || c == '"') {
      quote = c;
    } else if (src.substr(i, close.size()) == close) {
      return i;
    }
  }
  fail(line, "a tag is not closed (expected '" + std::string(close) + "')");
}

}  // namespace

std::vector<Tag> split_tags(std::string_view src) {
  std::vector<Tag> tags;
  std::string text;
  bool strip_next = false;  // '-' on the previous tag's end
  bool trim_newline = false;  // trim_blocks after a block or comment tag
  size_t pos = 0;
  auto flush_text = [&](std::string t, int line) {
    if (!t.empty()) tags.push_back({Tag::Type::text, std::move(t), {}, line});
  };
  while (pos <= src.size()) {
    size_t open = src.find('{', pos);
    while (open != std::string_view::npos && open + 1 < src.size() && src[open + 1] != '{' &&
           src[open + 1] != '%' && src[open + 1] != '#')
      open = src.find('{', open + 1);
    if (open + 1 >= src.size()) open = std::string_view::npos;
    std::string chunk(src.substr(pos, open == std::string_view::npos ? std::string_view::npos
                                                                     : open - pos));
    if (strip_next) {
      const size_t k = chunk.find_first_not_of(" \t\r\n");
      chunk.erase(0, k == std::string::npos ? chunk.size() : k);
    } else if (trim_newline && !chunk.empty() && chunk[0] == '\n') {
      chunk.erase(0, 1);
    }
    if (open == std::string_view::npos) {
      flush_text(std::move(chunk), line_of(src, pos));
      break;
    }
    const char kind = src[open + 1];
    const int line = line_of(src, open);
    const bool minus = open + 2 < src.size() && src[open + 2] == '-';
    const bool plus = open + 2 < src.size() && src[open + 2] == '+';
    if (minus) {
      const size_t k = chunk.find_last_not_of(" \t\r\n");
      chunk.resize(k == std::string::npos ? 0 : k + 1);
    } else if (kind != '{' && !plus) {  // lstrip_blocks: only blanks before it on its line
      const size_t nl = chunk.find_last_of('\n');
      const size_t start = nl == std::string::npos ? 0 : nl + 1;
      const size_t blanks = chunk.size() - start;
      const bool line_start = open == blanks || src[open - blanks - 1] == '\n';
      if (chunk.find_first_not_of(" \t", start) == std::string::npos && line_start)
        chunk.resize(start);
    }
    flush_text(std::move(chunk), line);
    const size_t inner = open + 2 + (minus || plus ? 1 : 0);
    const std::string_view close = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
    size_t end;
    if (kind == '#') {
      end = src.find(close, inner);
      if (end == std::string_view::npos) fail(line, "a comment is not closed");
    } else {
      end = tag_end(src, inner, close, line);
    }
    const bool end_minus = end > inner && src[end - 1] == '-';
    const std::string_view body = src.substr(inner, end - inner - (end_minus ? 1 : 0));
    if (kind != '#') {
      Tag t{kind == '{' ? Tag::Type::output : Tag::Type::block, std::string(body), {}, line};
      t.tokens = tokenize(body, line);
      tags.push_back(std::move(t));
    }
    strip_next = end_minus;
    trim_newline = kind != '{';
    pos = end + 2;
  }
  return tags;
}

}  // namespace vc::server::jinja
