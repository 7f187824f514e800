// POST /v1/completions and /v1/chat/completions without the HTTP: body in, one
// engine request, the reply out (a JSON body, or server-sent events written to a
// StreamSink as tokens arrive). A client that goes away cancels its request, which
// frees its KV in every tier. Knows nothing of sockets or Beast.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include <vericache/engine.hpp>

#include "runtime/request_validation.hpp"
#include "tools/server/openai_request.hpp"
#include "tools/server/tool_calls.hpp"

namespace vc {
class Tokenizer;
}

namespace vc::server {

class ChatTemplate;
class ServerMetrics;

/// Where a streamed reply goes. Every call after the peer left returns false.
class StreamSink {
 public:
  virtual ~StreamSink() = default;
  /// Sends the status line and headers of a text/event-stream reply.
  virtual bool begin_stream() = 0;
  /// Sends bytes of the event stream.
  virtual bool send(const std::string& bytes) = 0;
  /// Ends the stream (the last chunk).
  virtual bool end_stream() = 0;
  /// True once the client has closed its side (checked without blocking).
  virtual bool peer_closed() = 0;
};

/// A reply that is not streamed (or a stream that failed before it began).
struct Reply {
  int status = 200;
  std::string body;       ///< JSON
  bool streamed = false;  ///< the reply went out through the sink already
};

/// Everything a handler needs, shared by all connections.
struct ServerState {
  vericache::Engine* engine = nullptr;
  const Tokenizer* tokenizer = nullptr;
  RequestLimits limits;
  ServeSettings settings;
  const ChatTemplate* chat_template = nullptr;  ///< null: chat completions unavailable
  /// How a chat reply's tool calls are found (when the request has tools).
  ToolCallParser tool_call_parser = ToolCallParser::none;
  ServerMetrics* metrics = nullptr;             ///< null: none recorded
  std::atomic<bool> draining{false};
  std::atomic<uint64_t> next_response{1};
};

/// Handles one completion request; never throws (errors become OpenAI error bodies).
[[nodiscard]] Reply handle_completion(ServerState& state, Endpoint endpoint,
                                      const std::string& body, StreamSink& sink);

/// The reply for an ApiError.
[[nodiscard]] Reply error_reply(const ApiError& e);

}  // namespace vc::server
