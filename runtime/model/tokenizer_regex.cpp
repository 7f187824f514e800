// Text primitives of the tokenizer: error helper, UTF-8 stepping, the PCRE2
// regex wrapper, Hugging Face split behaviours and GPT-2's byte-to-unicode map.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <array>
#include <stdexcept>

#include "kernels/error.hpp"
#include "runtime/model/tokenizer_internal.hpp"

namespace vc::tok {

void fail(const std::string& source, const std::string& field, const std::string& what) {
  throw Error(source + ": field '" + field + "': " + what);
}

std::size_t utf8_len(std::string_view text, std::size_t i) {
  const auto c = static_cast<unsigned char>(text[i]);
  std::size_t n = 1;
  if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
  } else if (c >= 0xE0) {
    n = c <= 0xEF ? 3 : 1;
  } else if (c >= 0xC2) {
    n = 2;
  }
  if (i + n > text.size()) return 1;
  for (std::size_t k = 1; k < n; ++k) {
    if ((static_cast<unsigned char>(text[i + k]) & 0xC0) != 0x80) return 1;
  }
  return n;
}

namespace {

std::shared_ptr<void> compile(std::string_view pattern, uint32_t options) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   options | PCRE2_UTF | PCRE2_MATCH_INVALID_UTF, &error, &offset, nullptr);
  if (code == nullptr) {
    std::array<PCRE2_UCHAR, 256> buf{};
    pcre2_get_error_message(error, buf.data(), buf.size());
    throw std::invalid_argument("regex does not compile at offset " + std::to_string(offset) + ": " +
                                reinterpret_cast<const char*>(buf.data()));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter when unavailable
  return {code, [](void* p) { pcre2_code_free(static_cast<pcre2_code*>(p)); }};
}

}  // namespace

Regex::Regex(const std::string& pattern) : code_(compile(pattern, PCRE2_UCP)) {}

Regex Regex::literal(std::string_view literal) {
  return Regex(compile(literal, PCRE2_LITERAL));
}

std::vector<std::pair<std::size_t, std::size_t>> Regex::find_all(std::string_view text) const {
  auto* code = static_cast<pcre2_code*>(code_.get());
  std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> md(
      pcre2_match_data_create_from_pattern(code, nullptr), pcre2_match_data_free);
  std::vector<std::pair<std::size_t, std::size_t>> out;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::size_t pos = 0;
  uint32_t flags = 0;
  while (pos <= text.size()) {
    const int rc = pcre2_match(code, subject, text.size(), pos, flags, md.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) {
      if (flags == 0 || pos >= text.size()) break;
      pos += utf8_len(text, pos);  // no non-empty match at pos after an empty one: step on
      flags = 0;
      continue;
    }
    if (rc < 0) {
      std::array<PCRE2_UCHAR, 256> buf{};
      pcre2_get_error_message(rc, buf.data(), buf.size());
      throw Error(std::string("tokenizer: regex match failed: ") + reinterpret_cast<const char*>(buf.data()));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    out.emplace_back(ov[0], ov[1]);
    pos = ov[1];
    // After an empty match, look for a non-empty one at the same place (Perl semantics).
    flags = ov[0] == ov[1] ? (PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED) : 0;
  }
  return out;
}

std::string replace_all(std::string_view text, const Regex& re, std::string_view content) {
  std::string out;
  std::size_t prev = 0;
  for (const auto& [b, e] : re.find_all(text)) {
    out.append(text.substr(prev, b - prev));
    out.append(content);
    prev = e;
  }
  out.append(text.substr(prev));
  return out;
}

Regex parse_pattern(const json& j, const std::string& source, const std::string& field) {
  if (!j.is_object()) fail(source, field, "expected {\"String\": ...} or {\"Regex\": ...}");
  try {
    if (j.contains("String") && j["String"].is_string()) return Regex::literal(j["String"].get<std::string>());
    if (j.contains("Regex") && j["Regex"].is_string()) return Regex(j["Regex"].get<std::string>());
  } catch (const std::invalid_argument& e) {
    fail(source, field, e.what());
  }
  fail(source, field, "expected {\"String\": ...} or {\"Regex\": ...}");
}

std::vector<std::pair<std::size_t, std::size_t>> split_ranges(std::string_view text, const Regex& re,
                                                               SplitBehavior behavior, bool invert) {
  using Range = std::pair<std::size_t, std::size_t>;
  // Cover the text with alternating (range, is_match) parts, as Hugging Face does.
  std::vector<std::pair<Range, bool>> parts;
  std::size_t prev = 0;
  for (const auto& m : re.find_all(text)) {
    if (m.first != prev) parts.push_back({{prev, m.first}, invert});
    parts.push_back({m, !invert});
    prev = m.second;
  }
  if (prev != text.size()) parts.push_back({{prev, text.size()}, invert});

  std::vector<Range> out;
  switch (behavior) {
    case SplitBehavior::isolated:
      for (const auto& [r, m] : parts) out.push_back(r);
      break;
    case SplitBehavior::removed:
      for (const auto& [r, m] : parts) {
        if (!m) out.push_back(r);
      }
      break;
    case SplitBehavior::contiguous: {
      bool last = false;
      for (const auto& [r, m] : parts) {
        if (!out.empty() && m == last) {
          out.back().second = r.second;
        } else {
          out.push_back(r);
        }
        last = m;
      }
      break;
    }
    case SplitBehavior::merged_with_previous: {
      bool previous_match = false;
      for (const auto& [r, m] : parts) {
        if (m && !previous_match && !out.empty()) {
          out.back().second = r.second;
        } else {
          out.push_back(r);
        }
        previous_match = m;
      }
      break;
    }
    case SplitBehavior::merged_with_next: {
      bool previous_match = false;
      for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
        if (it->second && !previous_match && !out.empty()) {
          out.back().first = it->first.first;
        } else {
          out.push_back(it->first);
        }
        previous_match = it->second;
      }
      std::reverse(out.begin(), out.end());
      break;
    }
  }
  std::erase_if(out, [](const Range& r) { return r.first == r.second; });
  return out;
}

const std::vector<std::string>& byte_to_unicode() {
  static const std::vector<std::string> table = [] {
    auto encode = [](uint32_t cp) {
      std::string s;
      if (cp < 0x80) {
        s += static_cast<char>(cp);
      } else {  // all code points here are below 0x800
        s += static_cast<char>(0xC0 | (cp >> 6));
        s += static_cast<char>(0x80 | (cp & 0x3F));
      }
      return s;
    };
    std::vector<std::string> t(256);
    uint32_t n = 0;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      t[b] = encode(printable ? b : 256 + n++);
    }
    return t;
  }();
  return table;
}

}  // namespace vc::tok
