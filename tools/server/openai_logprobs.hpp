// The "logprobs" object of an OpenAI choice, for a run of output tokens: a whole
// response, or the tokens one streamed chunk carries.
//
//   /v1/completions (legacy), `logprobs: N`:
//     {"tokens": [text, ...], "token_logprobs": [lp, ...],
//      "top_logprobs": null (N = 0) | [{text: lp, ...} per token],  (N entries; two
//                       ids with the same text keep the more likely one)
//      "text_offset": [byte offset of each token in the completion text, ...]}
//   /v1/chat/completions, `logprobs: true` (+ `top_logprobs: N`):
//     {"content": [{"token": text, "logprob": lp, "bytes": [UTF-8 bytes],
//                   "top_logprobs": [{"token", "logprob", "bytes"}, ...N]}, ...]}
//
// A token's text is the tokenizer's decoding of that id alone; a logprob that is not
// finite (a token the model gives probability 0) is written as -9999.0, as OpenAI does.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <vericache/engine.hpp>

#include "tools/server/openai_request.hpp"

namespace vc::server {

/// One output token with what the engine reported for it.
struct LoggedToken {
  int32_t id = 0;
  float logprob = 0;
  std::vector<vericache::TokenLogprob> top;  ///< the request's top-N list (may be empty)
};

/// The text of one token id.
using TokenText = std::function<std::string(int32_t)>;

/// The output tokens of a finished request, with their logprobs.
[[nodiscard]] std::vector<LoggedToken> logged_tokens(const vericache::Result& r);

/// The choice's "logprobs" object for `tokens` (see the file comment). `text_offset`
/// is where the first token's text starts in the completion text; it is advanced
/// past the tokens, so consecutive chunks continue the count.
[[nodiscard]] nlohmann::ordered_json logprobs_json(Endpoint endpoint, std::span<const LoggedToken> tokens,
                                           int top_logprobs, const TokenText& text,
                                           size_t& text_offset);

}  // namespace vc::server
