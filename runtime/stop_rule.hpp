// When a request stops: max tokens, an end-of-sequence token, or a stop string in
// its text. One rule for every mode and for the single-request and actor engines,
// so all of them stop on exactly the same token.
#pragma once
#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "runtime/model/tokenizer.hpp"

namespace vc {

struct StopRule {
  size_t max_tokens = 0;
  std::vector<int32_t> eos_ids;      // empty: never stops on a token
  std::vector<std::string> stop;     // stop strings (need the tokenizer)
  const Tokenizer* tokenizer = nullptr;

  /// The finish reason once `out` (all output so far, the newest token last) must
  /// stop, else "".
  [[nodiscard]] std::string check(const std::vector<int32_t>& out) const {
    if (!out.empty() && std::find(eos_ids.begin(), eos_ids.end(), out.back()) != eos_ids.end())
      return "eos";
    if (!stop.empty() && tokenizer != nullptr) {
      // An occurrence that the newest token completes spans at most as many tokens
      // as the longest stop string has bytes (every token decodes to >= 1 byte);
      // earlier occurrences would have stopped earlier. So decode only that tail:
      // checking stays O(stop length) per token instead of O(output length).
      size_t longest = 0;
      for (const auto& s : stop) longest = std::max(longest, s.size());
      const size_t from = out.size() > longest + 1 ? out.size() - longest - 1 : 0;
      const std::string text = tokenizer->decode(
          std::span<const int32_t>(out.data() + from, out.size() - from));
      for (const auto& s : stop)
        if (!s.empty() && text.find(s) != std::string::npos) return "stop";
    }
    if (out.size() >= max_tokens) return "length";
    return "";
  }

  /// `text` cut before the first stop string it holds.
  [[nodiscard]] std::string cut(std::string text) const {
    for (const auto& s : stop) {
      const size_t at = s.empty() ? std::string::npos : text.find(s);
      if (at != std::string::npos) text.resize(at);
    }
    return text;
  }
};

}  // namespace vc
