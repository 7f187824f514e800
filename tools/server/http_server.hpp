// The HTTP/1.1 front of `vericache serve` (Boost.Beast over Boost.Asio, the only
// file that includes Beast): one thread per connection, keep-alive, routes
//   GET  /health, /v1/models, /metrics
//   POST /v1/completions, /v1/chat/completions
// Bearer auth on /v1/* when an API key is set; body size limit (413 before the body
// is read); a connection limit (503); a read deadline (`read_timeout_seconds`): a
// request whose headers, or then whose body, have not all come within it gets 408
// and the connection closes, and a connection that sent nothing of a request in
// that time (a new one, or an idle keep-alive) is closed without a reply. A
// request being handled or streamed has no deadline. run() serves until its stop
// descriptor turns readable, then drains: no new connections or requests (503),
// requests in flight finish (for at most `drain_seconds`, then they are
// cancelled), connections waiting for (the rest of) a request are closed.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "tools/server/completion_handler.hpp"

namespace vc::server {

struct HttpConfig {
  std::string host = "127.0.0.1";
  uint16_t port = 8000;          ///< 0: any free port (see HttpServer::port)
  std::string api_key;           ///< "" = no auth
  size_t max_connections = 256;
  double drain_seconds = 30;
  /// How long the headers of a request may take to arrive (from the accept, or the
  /// previous reply), and then its body (from the end of the headers).
  double read_timeout_seconds = 30;
};

class HttpServer {
 public:
  /// Binds and listens (throws vc::Error naming the address when it cannot).
  HttpServer(ServerState& state, const HttpConfig& cfg);
  ~HttpServer();
  /// The port bound (the chosen one when cfg.port was 0).
  [[nodiscard]] uint16_t port() const;
  /// Serves until `stop_fd` is readable, then drains and returns.
  void run(int stop_fd);
  /// Text for GET /metrics (set before run()).
  std::function<std::string()> metrics_text;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace vc::server
