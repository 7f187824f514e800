// When a request stops: max tokens, an end-of-sequence token, or a stop string in
// its text. One rule for every mode and for the single-request and actor engines,
// so all of them stop on exactly the same token.
#pragma once
#include <algorithm>
#include <cstdint>
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
      const std::string text = tokenizer->decode(out);
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
