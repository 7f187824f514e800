// The HTTP/1.1 front of `vericache serve` (http_server.hpp). Blocking Beast I/O on
// one thread per connection: a connection spends nearly all its time waiting for
// the engine, and the handler (completion_handler.cpp) polls the socket meanwhile
// so that a client that leaves cancels its request. Requests are read through a
// DeadlineReader (deadline_reader.hpp), so a client that stalls cannot hold its
// thread and connection slot.
#include "tools/server/http_server.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <chrono>
#include <condition_variable>
#include <ctime>
#include <map>
#include <mutex>
#include <sstream>
#include <string_view>
#include <thread>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "kernels/error.hpp"
#include "tools/server/deadline_reader.hpp"

namespace vc::server {

namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using nlohmann::json;

constexpr size_t kHeaderLimit = 16 * 1024;

struct Response {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::string allow;  // a 405's Allow header: the methods the path takes
};

Response from_reply(const Reply& r) { return {r.status, "application/json", r.body, ""}; }

Response from_error(const ApiError& e) { return from_reply(error_reply(e)); }

// The event stream of one request: HTTP/1.1 chunks, or for an HTTP/1.0 client
// (which knows no chunked encoding) the raw bytes, the end marked by closing the
// connection.
class SocketSink final : public StreamSink {
 public:
  SocketSink(tcp::socket& s, unsigned version, bool keep_alive)
      : s_(s), version_(version), keep_alive_(keep_alive), chunked_(version >= 11) {}
  bool begin_stream() override {
    http::response<http::empty_body> res{http::status::ok, version_};
    res.set(http::field::server, "vericache");
    res.set(http::field::content_type, "text/event-stream");
    res.set(http::field::cache_control, "no-cache");
    began_ = true;
    res.keep_alive(keep_alive_ && chunked_);
    if (chunked_) res.chunked(true);
    http::response_serializer<http::empty_body> sr{res};
    beast::error_code ec;
    http::write_header(s_, sr, ec);
    return ok(ec);
  }
  bool send(const std::string& bytes) override {
    beast::error_code ec;
    if (chunked_) net::write(s_, http::make_chunk(net::buffer(bytes)), ec);
    else net::write(s_, net::buffer(bytes), ec);
    return ok(ec);
  }
  bool end_stream() override {
    if (!chunked_) return !failed_;  // the caller closes the connection
    beast::error_code ec;
    net::write(s_, http::make_chunk_last(), ec);
    return ok(ec);
  }
  /// True when a stream went out whose end is the connection's close.
  [[nodiscard]] bool close_delimited() const { return began_ && !chunked_; }
  // Gone: a reset or hang-up (POLLHUP, POLLERR) or a failed write. The end of the
  // read side is not: a client may shut down its writing half once its request is
  // out (HTTP/1.0 tools, `nc -N`) and still read the answer. Such an end looks the
  // same as a client that closed its socket, so before the reply has begun an
  // HTTP/1.1 client is sent one interim "100 Continue" (which HTTP/1.1 clients
  // skip): a socket that was closed answers it with a reset, seen on the next call.
  bool peer_closed() override {
    if (failed_) return true;
    pollfd p{s_.native_handle(), POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLHUP | POLLERR | POLLNVAL)) return failed_ = true;
    if (probed_ || began_ || version_ < 11) return false;
    char c;
    const ssize_t n = ::recv(s_.native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n != 0) return false;  // n > 0: a pipelined request
    probed_ = true;
    beast::error_code ec;
    net::write(s_, net::buffer(std::string_view("HTTP/1.1 100 Continue\r\n\r\n")), ec);
    return !ok(ec);
  }

 private:
  bool ok(const beast::error_code& ec) {
    if (ec) failed_ = true;
    return !failed_;
  }
  tcp::socket& s_;
  unsigned version_;
  bool keep_alive_;
  bool chunked_;
  bool began_ = false;
  bool probed_ = false;  // the interim 100 Continue went out
  bool failed_ = false;
};

}  // namespace

struct HttpServer::Impl {
  ServerState& st;
  HttpConfig cfg;
  HttpServer* owner = nullptr;
  net::io_context ioc;
  tcp::acceptor acceptor{ioc};
  std::mutex mu;
  std::condition_variable cv;
  struct Conn {
    int fd = -1;
    bool idle = true;
  };
  std::map<uint64_t, Conn> conns;  // guarded by mu
  uint64_t next_conn = 0;
  bool draining = false;           // guarded by mu

  Impl(ServerState& s, const HttpConfig& c) : st(s), cfg(c) {}

  bool authorized(const http::request<http::string_body>& req) const {
    if (cfg.api_key.empty()) return true;
    const auto it = req.find(http::field::authorization);
    if (it == req.end()) return false;
    // "Bearer KEY": the scheme's name is case-insensitive (RFC 9110), one or more
    // spaces before the key.
    const std::string_view v(it->value().data(), it->value().size());
    const size_t sp = v.find(' ');
    if (sp != 6 || !boost::beast::iequals(boost::beast::string_view(v.data(), sp), "Bearer")) return false;
    const size_t key = v.find_first_not_of(' ', sp);
    return key != std::string_view::npos && v.substr(key) == cfg.api_key;
  }

  Response models() const {
    const json model = {{"id", st.settings.model_name},
                        {"object", "model"},
                        {"created", int64_t(std::time(nullptr))},
                        {"owned_by", "vericache"},
                        {"max_model_len", st.limits.context}};
    return {200, "application/json",
            json{{"object", "list"}, {"data", json::array({model})}}.dump(), ""};
  }

  Response route(const http::request<http::string_body>& req, SocketSink& sink) {
    std::string path(req.target());
    if (const size_t q = path.find('?'); q != std::string::npos) path.resize(q);
    const bool get = req.method() == http::verb::get, post = req.method() == http::verb::post;
    auto wrong_method = [&](const char* allowed) {
      Response r = from_error(ApiError(405, "invalid_request_error",
                                       "method " + std::string(req.method_string()) +
                                           " is not allowed on " + path + " (use " + allowed + ")"));
      r.allow = allowed;
      return r;
    };
    if (path == "/health") {
      if (!get) return wrong_method("GET");
      if (st.draining.load())
        return from_error(ApiError(503, "service_unavailable", "the server is shutting down", "",
                                   "shutting_down"));
      return {200, "application/json", R"({"status":"ok"})", ""};
    }
    if (path == "/metrics") {
      if (!get) return wrong_method("GET");
      if (!owner->metrics_text)
        return from_error(ApiError(404, "invalid_request_error", "no metrics on this server"));
      return {200, "text/plain; version=0.0.4; charset=utf-8", owner->metrics_text(), ""};
    }
    const bool known = path == "/v1/models" || path == "/v1/completions" ||
                       path == "/v1/chat/completions";
    if (!known)
      return from_error(ApiError(404, "invalid_request_error", "no route for " + path +
                                 " (known: /health, /metrics, /v1/models, /v1/completions, "
                                 "/v1/chat/completions)", "", "not_found"));
    if (!cfg.api_key.empty() && req.count(http::field::authorization) > 1)
      return from_error(bad_request("", "more than one Authorization header"));
    if (!authorized(req))
      return from_error(ApiError(401, "authentication_error",
                                 "a valid API key is required: send 'Authorization: Bearer KEY'",
                                 "", "invalid_api_key"));
    if (path == "/v1/models") return get ? models() : wrong_method("GET");
    if (!post) return wrong_method("POST");
    const Endpoint e = path == "/v1/completions" ? Endpoint::completions : Endpoint::chat;
    const Reply r = handle_completion(st, e, req.body(), sink);
    if (r.streamed) return {0, "", "", ""};
    return from_reply(r);
  }

  void write(tcp::socket& s, const Response& r, unsigned version, bool keep_alive) {
    http::response<http::string_body> res{static_cast<http::status>(r.status), version};
    res.set(http::field::server, "vericache");
    res.set(http::field::content_type, r.content_type);
    if (!r.allow.empty()) res.set(http::field::allow, r.allow);
    // A busy (429) or unavailable (503) reply says when to try again.
    if (r.status == 429 || r.status == 503) res.set(http::field::retry_after, "1");
    res.keep_alive(keep_alive);
    res.body() = r.body;
    res.prepare_payload();
    beast::error_code ec;
    http::write(s, res, ec);
  }

  // Marks the connection idle (waiting for a request, or the rest of one) or busy
  // (handling one); false once the server drains (the connection should close).
  bool set_idle(uint64_t id, bool idle) {
    std::lock_guard lock(mu);
    conns[id].idle = idle;
    return !draining;
  }

  Response too_large() const {
    return from_error(ApiError(413, "invalid_request_error",
                               "the body is larger than the limit of " +
                                   std::to_string(st.settings.max_body_bytes) + " bytes"));
  }

  // A request the drain cut off: the client may send it again elsewhere.
  static Response shutting_down() {
    return from_error(ApiError(503, "service_unavailable", "the server is shutting down", "",
                               "shutting_down"));
  }

  // Headers past kHeaderLimit: 414 when the request line alone is, 431 otherwise.
  // The parser has the target once it parsed the line; before that (the first read
  // held part of the line) it consumed nothing, so `buf` begins with the line.
  static Response header_too_large(const http::request_parser<http::string_body>& parser,
                                   const beast::flat_buffer& buf) {
    const auto data = buf.data();
    const std::string_view got(static_cast<const char*>(data.data()), data.size());
    const size_t line_end = got.find("\r\n");
    if (parser.get().target().empty() && (line_end == std::string_view::npos || line_end + 2 > kHeaderLimit))
      return from_error(ApiError(414, "invalid_request_error",
                                 "the request line is longer than " + std::to_string(kHeaderLimit) + " bytes"));
    return from_error(ApiError(431, "invalid_request_error",
                               "request headers too large (over " + std::to_string(kHeaderLimit) + " bytes)"));
  }

  Response timed_out(const char* part) const {
    std::ostringstream s;
    s << "the request's " << part << " did not arrive within " << cfg.read_timeout_seconds
      << " s (the server's read timeout)";
    return from_error(ApiError(408, "invalid_request_error", s.str(), "", "request_timeout"));
  }

  // Reads the next request into `parser`, its headers due `timeout` from now and
  // its body `timeout` after its headers. False when the connection should close,
  // after the error reply if one is due (nothing when no byte of a request came).
  bool read_request(tcp::socket& s, DeadlineReader& in, beast::flat_buffer& buf,
                    http::request_parser<http::string_body>& parser,
                    DeadlineReader::clock::duration timeout) {
    const bool pipelined = buf.size() > 0;
    in.reset_count();
    in.expire_at(DeadlineReader::clock::now() + timeout);
    beast::error_code ec;
    http::read_header(in, buf, parser, ec);
    const auto cut_by_drain = [&] {  // part of a request came, then the drain ended the read
      return (ec == http::error::end_of_stream || ec == http::error::partial_message ||
              ec == net::error::eof) &&
             draining_now();
    };
    if (ec) {
      if (cut_by_drain() && (pipelined || in.bytes_read() > 0)) {
        write(s, shutting_down(), 11, false);
      } else if (ec == beast::error::timeout) {
        if (pipelined || in.bytes_read() > 0) write(s, timed_out("headers"), 11, false);
      } else if (ec == http::error::body_limit) {  // a Content-Length over the limit
        write(s, too_large(), 11, false);
      } else if (ec == http::error::header_limit) {
        write(s, header_too_large(parser, buf), 11, false);
      } else if (ec != http::error::end_of_stream && ec != net::error::eof &&
                 ec != net::error::connection_reset && !draining_now()) {
        write(s, from_error(bad_request("", "malformed HTTP request: " + ec.message())), 11,
              false);
      }
      return false;
    }
    const unsigned version = parser.get().version();
    // A transfer coding other than chunked last leaves the body's length unknown:
    // its bytes would be read as the next request (RFC 9112 6.3: 400, then close).
    if (parser.get().count(http::field::transfer_encoding) > 0 && !parser.chunked()) {
      write(s, from_error(bad_request("", "unsupported Transfer-Encoding '" +
                                              std::string(parser.get()[http::field::transfer_encoding]) +
                                              "' (only chunked)")),
            version, false);
      return false;
    }
    if (beast::iequals(parser.get()[http::field::expect], "100-continue")) {
      http::response<http::empty_body> cont{http::status::continue_, version};
      http::write(s, cont, ec);
      if (ec) return false;
    }
    in.expire_at(DeadlineReader::clock::now() + timeout);
    http::read(in, buf, parser, ec);
    if (cut_by_drain()) {
      write(s, shutting_down(), version, false);
    } else if (ec == http::error::body_limit) {
      write(s, too_large(), version, false);
    } else if (ec == beast::error::timeout) {
      write(s, timed_out("body"), version, false);
    } else if (ec == http::error::partial_message) {  // the peer ended its side mid-body
      const std::string why = parser.chunked() ? "the request body ended before its last chunk"
                                               : "the request body ended before its Content-Length (" +
                                                     std::string(parser.get()[http::field::content_length]) +
                                                     " bytes)";
      write(s, from_error(bad_request("", why)), version, false);
    } else if (ec && ec != http::error::end_of_stream && ec != net::error::eof &&
               ec != net::error::connection_reset) {
      // A malformed body (a bad chunk size, say) gets its answer before the close.
      write(s, from_error(bad_request("", "malformed HTTP body: " + ec.message())), version, false);
    }
    return !ec;
  }

  bool draining_now() {
    std::lock_guard lock(mu);
    return draining;
  }

  void serve(uint64_t id, tcp::socket s) {
    beast::flat_buffer buf;
    DeadlineReader in(s);
    const auto timeout = std::chrono::duration_cast<DeadlineReader::clock::duration>(
        std::chrono::duration<double>(cfg.read_timeout_seconds));
    for (;;) {
      if (!set_idle(id, true)) break;
      http::request_parser<http::string_body> parser;
      parser.header_limit(kHeaderLimit);
      parser.body_limit(st.settings.max_body_bytes);
      if (!read_request(s, in, buf, parser, timeout)) break;
      const bool open = set_idle(id, false);
      const http::request<http::string_body>& req = parser.get();
      const unsigned version = req.version();
      bool keep_alive = req.keep_alive() && open;
      SocketSink sink(s, version, keep_alive);
      Response r;
      try {
        r = route(req, sink);
      } catch (const std::exception& e) {
        r = from_error(ApiError(500, "server_error", std::string("internal error: ") + e.what()));
      }
      keep_alive = keep_alive && !st.draining.load();
      if (r.status == 0) {  // streamed
        if (sink.peer_closed() || sink.close_delimited()) break;
      } else {
        write(s, r, version, keep_alive);
      }
      if (!keep_alive) break;
    }
    beast::error_code ec;
    s.shutdown(tcp::socket::shutdown_both, ec);
    s.close(ec);
  }
};

HttpServer::HttpServer(ServerState& state, const HttpConfig& cfg)
    : impl_(std::make_unique<Impl>(state, cfg)) {
  impl_->owner = this;
  beast::error_code ec;
  const auto address = net::ip::make_address(cfg.host, ec);
  if (ec) throw Error("--host '" + cfg.host + "': not an IP address (" + ec.message() + ")");
  const tcp::endpoint ep{address, cfg.port};
  tcp::acceptor& a = impl_->acceptor;
  a.open(ep.protocol(), ec);
  if (!ec) a.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) a.bind(ep, ec);
  if (!ec) a.listen(net::socket_base::max_listen_connections, ec);
  if (ec)
    throw Error("cannot listen on " + cfg.host + ":" + std::to_string(cfg.port) + ": " +
                ec.message());
}

HttpServer::~HttpServer() = default;

uint16_t HttpServer::port() const { return impl_->acceptor.local_endpoint().port(); }

void HttpServer::run(int stop_fd) {
  Impl& m = *impl_;
  for (;;) {
    pollfd p[2] = {{m.acceptor.native_handle(), POLLIN, 0}, {stop_fd, POLLIN, 0}};
    if (::poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      throw Error(std::string("poll failed: ") + std::strerror(errno));
    }
    if (p[1].revents != 0) break;
    if ((p[0].revents & POLLIN) == 0) continue;
    tcp::socket s(m.ioc);
    beast::error_code ec;
    m.acceptor.accept(s, ec);
    if (ec) continue;
    std::unique_lock lock(m.mu);
    if (m.conns.size() >= m.cfg.max_connections) {
      lock.unlock();
      m.write(s, from_error(ApiError(503, "service_unavailable",
                                     "too many connections (the limit is " +
                                         std::to_string(m.cfg.max_connections) + ")")),
              11, false);
      continue;
    }
    const uint64_t id = m.next_conn++;
    m.conns[id] = {s.native_handle(), true};
    lock.unlock();
    std::thread([&m, id, sock = std::move(s)]() mutable {
      m.serve(id, std::move(sock));
      std::lock_guard l(m.mu);
      m.conns.erase(id);
      m.cv.notify_all();
    }).detach();
  }

  // Drain: refuse new work, let requests in flight finish, close the connections
  // that wait for (the rest of) a request.
  m.st.draining.store(true);
  beast::error_code ec;
  m.acceptor.close(ec);
  std::unique_lock lock(m.mu);
  m.draining = true;
  spdlog::info("draining: {} connection(s) open", m.conns.size());
  for (auto& [id, c] : m.conns)
    if (c.idle) ::shutdown(c.fd, SHUT_RD);
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration<double>(m.cfg.drain_seconds);
  if (!m.cv.wait_until(lock, deadline, [&] { return m.conns.empty(); })) {
    spdlog::warn("drain: {} connection(s) still busy after {} s; cancelling their requests",
                 m.conns.size(), m.cfg.drain_seconds);
    for (auto& [id, c] : m.conns) ::shutdown(c.fd, SHUT_RDWR);  // their handlers cancel
    m.cv.wait(lock, [&] { return m.conns.empty(); });
  }
}

}  // namespace vc::server
