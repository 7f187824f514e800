// OpenAI request bodies -> one validated engine request. The body's OpenAI fields
// (prompt, max_tokens / max_completion_tokens, temperature, top_p, top_k, seed, stop,
// n, stream, stream_options, logprobs, tools, tool_choice, ...) and VeriCache's own
// extra fields (mode, compressor, compressor_params, ratio, draft, draft_hierarchy,
// ngram_min, ngram_max, ngram_proposal, fold_every, ignore_eos) are mapped onto
// the request JSON of `vericache batch` and checked by the same validation layer
// (runtime/request_validation.hpp), with the server's defaults and limits. Every
// refusal is an ApiError naming the field. In chat, max_completion_tokens wins over
// max_tokens (OpenAI deprecates max_tokens there); each is checked on its own.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <vericache/engine.hpp>

#include "runtime/request_validation.hpp"
#include "tools/server/api_error.hpp"

namespace vc {
class Tokenizer;
}

namespace vc::server {

/// What a request gets when it does not say, and what it may ask for at most.
struct ServeSettings {
  std::string model_name;           ///< the id /v1/models lists and requests may name
  std::string mode = "vericache";   ///< default decode mode
  std::string compressor = "snapkv";
  double ratio = 4.0;
  std::string draft = "16";
  std::string draft_hierarchy = "none";  ///< "none" or "ngram" (vericache mode)
  int64_t ngram_min = 2, ngram_max = 4, ngram_proposal = 8;
  /// max_tokens of a request that sends none (nor max_completion_tokens), cut to the
  /// room its prompt leaves in the context and to max_tokens_limit.
  int64_t default_max_tokens = 128;
  int64_t max_tokens_limit = 0;     ///< 0: the model's context
  int64_t max_prompt_tokens = 0;    ///< 0: the model's context
  size_t max_body_bytes = size_t(1) << 20;
};

/// One request, ready for Engine::submit.
struct ParsedRequest {
  vericache::Request engine_request;
  size_t prompt_tokens = 0;
  bool stream = false;
  bool include_usage = false;       ///< stream_options.include_usage
  bool logprobs = false;            ///< return the chosen tokens' log-probabilities
  /// With logprobs: alternatives per token (completions `logprobs: N`, 0..5; chat
  /// `top_logprobs`, 0..20); engine_request.top_logprobs holds the same.
  int top_logprobs = 0;
  /// Chat: the functions of `tools` whose calls are parsed out of the reply (empty
  /// without tools or with tool_choice "none").
  std::vector<std::string> tool_names;
};

/// The most alternatives per token each endpoint allows (OpenAI's limits).
inline constexpr int kMaxCompletionLogprobs = 5;
inline constexpr int kMaxChatTopLogprobs = 20;

/// Which endpoint the body came to: their prompt fields and logprobs differ.
enum class Endpoint { completions, chat };

/// Reads and checks a body (already parsed, depth-bounded). `prompt_text` is the
/// rendered chat prompt for Endpoint::chat (the caller renders `messages`).
[[nodiscard]] ParsedRequest parse_request(const nlohmann::json& body, Endpoint endpoint,
                                          const ServeSettings& settings,
                                          const RequestLimits& limits, const Tokenizer& tokenizer,
                                          const std::string& prompt_text = "");

}  // namespace vc::server
