// Engine results -> OpenAI response bodies: the completion and chat completion
// objects, their streamed chunks, usage, and VeriCache's stats in an extra
// "vericache" field. TextStream turns a request's streamed token ids into text
// deltas whose concatenation is exactly the final text.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <vericache/engine.hpp>

#include "tools/server/openai_request.hpp"
#include "tools/server/tool_calls.hpp"

namespace vc::server {

/// What every object of one response shares.
struct ResponseMeta {
  std::string id;       ///< "cmpl-..." or "chatcmpl-..."
  int64_t created = 0;  ///< unix seconds
  std::string model;
  Endpoint endpoint = Endpoint::completions;
};

using Decoder = std::function<std::string(const std::vector<int32_t>&)>;

/// OpenAI's finish_reason for the engine's ("eos" and "stop" -> "stop").
[[nodiscard]] std::string finish_reason(const std::string& engine_reason);

/// {"prompt_tokens", "completion_tokens", "total_tokens"}.
[[nodiscard]] nlohmann::ordered_json usage_json(const vericache::Result& r);

/// The "vericache" field: mode, compressor, rounds, drafted/accepted, timings.
[[nodiscard]] nlohmann::ordered_json vericache_stats_json(const vericache::Request& q,
                                                  const vericache::Result& r);

/// The whole (non-streamed) response body. `parsed`: the reply's tool calls (chat
/// with tools): when it holds calls, the message's `content` is the text outside them
/// (null when blank), `tool_calls` lists them and finish_reason is "tool_calls".
[[nodiscard]] nlohmann::ordered_json response_body(const ResponseMeta& m, const ParsedRequest& p,
                                           const vericache::Result& r, const Decoder& decode,
                                           const ParsedReply* parsed = nullptr);

/// A fresh tool call id, "call_" and 24 random letters and digits.
[[nodiscard]] std::string new_tool_call_id();

/// OpenAI's `tool_calls` list: [{"id", "type": "function", "function": {"name",
/// "arguments"}}], each with its "index" first when `streamed` (a delta's form).
[[nodiscard]] nlohmann::ordered_json tool_calls_json(const std::vector<ToolCall>& calls,
                                                     bool streamed);

/// The streamed chunk that carries a reply's tool calls, all at once: `delta` holds
/// the role (first chunk), the content not sent yet (omitted when empty; null in a
/// first chunk) and `tool_calls` (tool_calls_json's streamed form); finish_reason null.
[[nodiscard]] nlohmann::ordered_json tool_calls_chunk_body(const ResponseMeta& m,
                                                           const std::string& content,
                                                           const std::vector<ToolCall>& calls,
                                                           bool first,
                                                           nlohmann::ordered_json logprobs = nullptr);

/// One streamed chunk: `delta` text, finish_reason null when empty. The first chat
/// chunk carries the assistant role. `logprobs`: the choice's logprobs object of the
/// tokens the chunk carries (openai_logprobs.hpp), null when not asked for.
[[nodiscard]] nlohmann::ordered_json chunk_body(const ResponseMeta& m, const std::string& delta,
                                        const std::string& finish, bool first,
                                        nlohmann::ordered_json logprobs = nullptr);

/// The last chunks of a streamed chat reply whose text went out through a
/// ToolCallGate (`sent`: what it let out, a prefix of `parsed.content`): without calls
/// one chunk with the rest of the text and `finish`; with calls tool_calls_chunk_body
/// (the rest of the content, null when blank and nothing went out) and a chunk with
/// finish_reason "tool_calls".
[[nodiscard]] std::vector<nlohmann::ordered_json> final_tool_call_chunks(
    const ResponseMeta& m, const ParsedReply& parsed, const std::string& sent,
    const std::string& finish, bool first, nlohmann::ordered_json logprobs = nullptr);

/// The final usage-only chunk of stream_options.include_usage (choices empty).
[[nodiscard]] nlohmann::ordered_json usage_chunk_body(const ResponseMeta& m, const ParsedRequest& p,
                                              const vericache::Result& r);

/// Token ids in, text deltas out. Holds back text that may still change: an
/// incomplete UTF-8 sequence at the end, and a tail that could begin a stop string
/// (the engine cuts the final text before a stop string). finish() returns the rest
/// of the final text, so the deltas always add up to it.
class TextStream {
 public:
  TextStream(Decoder decode, std::vector<std::string> stop)
      : decode_(std::move(decode)), stop_(std::move(stop)) {}
  /// The text that token `id` lets out ("" if none yet).
  [[nodiscard]] std::string push(int32_t id);
  /// What remains of `final_text` after everything already let out.
  [[nodiscard]] std::string finish(const std::string& final_text);
  [[nodiscard]] const std::string& sent() const { return sent_; }

 private:
  Decoder decode_;
  std::vector<std::string> stop_;
  std::vector<int32_t> ids_;
  std::string sent_;
};

}  // namespace vc::server
