// Decoders of tokenizer.json (ByteLevel, Metaspace, Replace, ByteFallback, Fuse,
// Strip, Sequence). Bytes that do not form complete UTF-8 are kept as they are.
#include "runtime/model/tokenizer_internal.hpp"

namespace vc::tok {

namespace {

// Code point of the UTF-8 character at text[i] (n bytes), or -1 when invalid.
int32_t code_point(std::string_view text, std::size_t i, std::size_t n) {
  const auto c = static_cast<unsigned char>(text[i]);
  if (n == 1) return c < 0x80 ? c : -1;
  int32_t cp = c & (0x7F >> n);
  for (std::size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3F);
  return cp;
}

// Inverse of byte_to_unicode, indexed by code point (-1: not a byte character).
const std::vector<int>& unicode_to_byte() {
  static const std::vector<int> table = [] {
    std::vector<int> t(512, -1);
    const auto& fwd = byte_to_unicode();
    for (int b = 0; b < 256; ++b) t[code_point(fwd[b], 0, fwd[b].size())] = b;
    return t;
  }();
  return table;
}

std::string byte_level_decode(const std::string& token) {
  const auto& inv = unicode_to_byte();
  std::string out;
  for (std::size_t i = 0; i < token.size();) {
    const std::size_t n = utf8_len(token, i);
    const int32_t cp = code_point(token, i, n);
    if (cp < 0 || cp >= static_cast<int32_t>(inv.size()) || inv[cp] < 0) return token;  // as Hugging Face
    out += static_cast<char>(inv[cp]);
    i += n;
  }
  return out;
}

// "<0xNN>" -> the byte, else nullopt.
std::optional<char> byte_token(const std::string& token) {
  if (token.size() != 6 || !token.starts_with("<0x") || token.back() != '>') return std::nullopt;
  int value = 0;
  for (char c : token.substr(3, 2)) {
    int d = -1;
    if (c >= '0' && c <= '9') d = c - '0';
    if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    if (d < 0) return std::nullopt;
    value = value * 16 + d;
  }
  return static_cast<char>(value);
}

std::string strip(const std::string& token, const std::string& ch, int start, int stop) {
  std::size_t b = 0;
  std::size_t e = token.size();
  for (int k = 0; k < start && !ch.empty() && token.compare(b, ch.size(), ch) == 0; ++k) b += ch.size();
  for (int k = 0; k < stop && !ch.empty() && e >= b + ch.size() && token.compare(e - ch.size(), ch.size(), ch) == 0;
       ++k) {
    e -= ch.size();
  }
  return token.substr(b, e - b);
}

void parse_step(const json& j, const std::string& source, const std::string& field, std::vector<DecoderStep>& out) {
  const std::string type = type_of(j, source, field);
  DecoderStep step;
  if (type == "Sequence") {
    const json& items = get_array(j, "decoders", source, field);
    for (std::size_t i = 0; i < items.size(); ++i) {
      parse_step(items[i], source, field + ".decoders[" + std::to_string(i) + "]", out);
    }
    return;
  }
  if (type == "ByteLevel") {
    step.kind = DecoderStep::Kind::byte_level;
  } else if (type == "Metaspace") {
    step.kind = DecoderStep::Kind::metaspace;
    if (j.contains("replacement")) step.replacement = get_string(j, "replacement", source, field);
    if (j.contains("prepend_scheme") && !j["prepend_scheme"].is_null()) {
      step.strip_first = get_string(j, "prepend_scheme", source, field) != "never";
    } else {
      step.strip_first = get_bool(j, "add_prefix_space", true, source, field);
    }
    step.pattern = Regex::literal(step.replacement);
  } else if (type == "Replace") {
    step.kind = DecoderStep::Kind::replace;
    if (!j.contains("pattern")) fail(source, field + ".pattern", "missing");
    step.pattern = parse_pattern(j["pattern"], source, field + ".pattern");
    step.content = get_string(j, "content", source, field);
  } else if (type == "ByteFallback") {
    step.kind = DecoderStep::Kind::byte_fallback;
  } else if (type == "Fuse") {
    step.kind = DecoderStep::Kind::fuse;
  } else if (type == "Strip") {
    step.kind = DecoderStep::Kind::strip;
    step.content = get_string(j, "content", source, field);
    for (auto [key, dst] : {std::pair{"start", &step.start}, std::pair{"stop", &step.stop}}) {
      if (!j.contains(key) || !j[key].is_number_integer() || j[key].get<int>() < 0) {
        fail(source, field + "." + key, "missing or not a non-negative integer");
      }
      *dst = j[key].get<int>();
    }
  } else {
    fail(source, field + ".type",
         "unsupported decoder type \"" + type +
             "\" (supported: ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip, Sequence)");
  }
  out.push_back(std::move(step));
}

}  // namespace

std::vector<DecoderStep> parse_decoder(const json& j, const std::string& source, const std::string& field) {
  std::vector<DecoderStep> out;
  if (!j.is_null()) parse_step(j, source, field, out);
  return out;
}

std::string run_decoders(const std::vector<DecoderStep>& steps, std::vector<DecodeToken> tokens) {
  std::string out;
  if (steps.empty()) {
    for (std::size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i].text;
    return out;
  }
  for (const auto& step : steps) {
    switch (step.kind) {
      case DecoderStep::Kind::byte_level:
        for (auto& t : tokens) {
          if (!t.added) t.text = byte_level_decode(t.text);
        }
        break;
      case DecoderStep::Kind::metaspace:
        for (std::size_t i = 0; i < tokens.size(); ++i) {
          const bool drop = i == 0 && step.strip_first;
          tokens[i].text = replace_all(tokens[i].text, *step.pattern, drop ? "" : " ");
        }
        break;
      case DecoderStep::Kind::replace:
        for (auto& t : tokens) t.text = replace_all(t.text, *step.pattern, step.content);
        break;
      case DecoderStep::Kind::byte_fallback:
        for (auto& t : tokens) {
          if (!t.added) {
            if (auto b = byte_token(t.text)) t.text = std::string(1, *b);
          }
        }
        break;
      case DecoderStep::Kind::fuse: {
        DecodeToken fused;
        for (const auto& t : tokens) fused.text += t.text;
        tokens.assign(1, std::move(fused));
        break;
      }
      case DecoderStep::Kind::strip:
        for (auto& t : tokens) t.text = strip(t.text, step.content, step.start, step.stop);
        break;
    }
  }
  for (const auto& t : tokens) out += t.text;
  return out;
}

}  // namespace vc::tok
