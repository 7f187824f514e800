// Pipelined Redis client over Boost.Asio with hiredis's reply reader (see header).
#include "kvtiers/remote/redis_client.hpp"

#include <hiredis/hiredis.h>
#include <hiredis/read.h>

#include <array>
#include <functional>
#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange

#include <boost/asio.hpp>
#include <optional>

namespace vc {

namespace asio = boost::asio;
using asio::ip::tcp;

RedisEndpoint parse_redis_url(const std::string& url) {
  const std::string scheme = "redis://";
  auto bad = [&](const std::string& why) {
    return Error("--remote: '" + url + "' is not a redis://HOST:PORT URL (" + why + ")");
  };
  if (url.rfind(scheme, 0) != 0) throw bad("it must start with redis://");
  std::string rest = url.substr(scheme.size());
  while (!rest.empty() && rest.back() == '/') rest.pop_back();
  RedisEndpoint ep;
  std::string port;
  if (!rest.empty() && rest.front() == '[') {
    const size_t close = rest.find(']');
    if (close == std::string::npos) throw bad("unclosed '['");
    ep.host = rest.substr(1, close - 1);
    if (close + 1 < rest.size()) {
      if (rest[close + 1] != ':') throw bad("expected ':' after ']'");
      port = rest.substr(close + 2);
    }
  } else {
    const size_t colon = rest.rfind(':');
    ep.host = rest.substr(0, colon);
    if (colon != std::string::npos) port = rest.substr(colon + 1);
  }
  if (ep.host.empty()) throw bad("no host");
  if (ep.host.find_first_of("/@?#") != std::string::npos) throw bad("paths, users and queries are not supported");
  if (!port.empty()) {
    if (port.find_first_not_of("0123456789") != std::string::npos || port.size() > 5)
      throw bad("bad port '" + port + "'");
    const unsigned long p = std::stoul(port);
    if (p == 0 || p > 65535) throw bad("port out of range");
    ep.port = uint16_t(p);
  }
  return ep;
}

namespace {

RedisReply copy_reply(const redisReply* r) {
  RedisReply out;
  switch (r->type) {
    case REDIS_REPLY_STRING:
      out.type = RedisReply::Type::string;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_STATUS:
      out.type = RedisReply::Type::status;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_ERROR:
      out.type = RedisReply::Type::error;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_INTEGER:
      out.type = RedisReply::Type::integer;
      out.integer = r->integer;
      break;
    case REDIS_REPLY_ARRAY:
      out.type = RedisReply::Type::array;
      for (size_t i = 0; i < r->elements; ++i) out.elements.push_back(copy_reply(r->element[i]));
      break;
    default:
      out.type = RedisReply::Type::nil;
  }
  return out;
}

std::string format_command(const RedisCommand& cmd) {
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (const std::string& a : cmd) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  char* target = nullptr;
  const int n = redisFormatCommandArgv(&target, int(argv.size()), argv.data(), lens.data());
  if (n < 0 || target == nullptr) throw Error("redis: cannot format a command");
  std::string out(target, size_t(n));
  redisFreeCommand(target);
  return out;
}

}  // namespace

/// One pooled connection: its socket, its reader and the batch in flight on it.
struct Connection {
  explicit Connection(asio::io_context& io) : socket(io) {}
  ~Connection() {
    if (reader != nullptr) redisReaderFree(reader);
  }
  tcp::socket socket;
  redisReader* reader = nullptr;
  bool connected = false;
  // The batch in flight:
  std::string out;
  std::vector<size_t> slots;  // reply index of each command sent on this connection
  size_t got = 0;
  std::array<char, 64 * 1024> buf{};
  std::string error;  // empty while fine

  void reset() {
    boost::system::error_code ec;
    socket.close(ec);
    connected = false;
    if (reader != nullptr) redisReaderFree(reader);
    reader = nullptr;
  }
};

struct RedisClient::Impl {
  asio::io_context io;
  std::vector<std::unique_ptr<Connection>> pool;
  RedisTimeouts timeouts;
};

RedisClient::RedisClient(RedisEndpoint endpoint, RedisTimeouts timeouts, size_t connections)
    : endpoint_(std::move(endpoint)), impl_(std::make_unique<Impl>()) {
  impl_->timeouts = timeouts;
  for (size_t i = 0; i < std::max<size_t>(1, connections); ++i)
    impl_->pool.push_back(std::make_unique<Connection>(impl_->io));
}

RedisClient::~RedisClient() = default;

void RedisClient::set_timeouts(RedisTimeouts t) { impl_->timeouts = t; }

RedisReply RedisClient::command(const RedisCommand& cmd) { return pipeline({cmd}).at(0); }

std::vector<RedisReply> RedisClient::pipeline(const std::vector<RedisCommand>& commands) {
  std::vector<RedisReply> replies(commands.size());
  if (commands.empty()) return replies;
  Impl& m = *impl_;
  const size_t n_conn = std::min(m.pool.size(), commands.size());
  const std::string where = "remote store " + endpoint_.url();

  // Connect the connections this batch uses (all at once, one deadline).
  {
    tcp::resolver resolver(m.io);
    boost::system::error_code ec;
    const auto endpoints = resolver.resolve(endpoint_.host, std::to_string(endpoint_.port), ec);
    if (ec) throw RedisError(where + ": cannot resolve host: " + ec.message());
    size_t pending = 0;
    for (size_t c = 0; c < n_conn; ++c) {
      Connection& cn = *m.pool[c];
      if (cn.connected) continue;
      cn.reset();
      cn.error.clear();
      ++pending;
      asio::async_connect(cn.socket, endpoints, [&cn, &pending](const boost::system::error_code& e, const tcp::endpoint&) {
        --pending;
        if (e) cn.error = e.message();
        else cn.connected = true;
      });
    }
    if (pending > 0) {
      m.io.restart();
      m.io.run_for(m.timeouts.connect);
      if (pending > 0) {
        for (size_t c = 0; c < n_conn; ++c)
          if (!m.pool[c]->connected) m.pool[c]->reset();
        m.io.restart();
        m.io.run();
        throw RedisError(where + ": connect timed out after " +
                         std::to_string(m.timeouts.connect.count()) + " ms");
      }
      for (size_t c = 0; c < n_conn; ++c) {
        Connection& cn = *m.pool[c];
        if (!cn.connected) {
          const std::string e = cn.error;
          cn.reset();
          throw RedisError(where + ": cannot connect: " + e);
        }
        boost::system::error_code ignored;
        cn.socket.set_option(tcp::no_delay(true), ignored);
      }
    }
  }

  // Spread the commands, write each connection's share at once, read its replies.
  for (size_t c = 0; c < n_conn; ++c) {
    Connection& cn = *m.pool[c];
    cn.out.clear();
    cn.slots.clear();
    cn.got = 0;
    cn.error.clear();
    if (cn.reader == nullptr) cn.reader = redisReaderCreate();
  }
  for (size_t i = 0; i < commands.size(); ++i) {
    Connection& cn = *m.pool[i % n_conn];
    cn.out += format_command(commands[i]);
    cn.slots.push_back(i);
  }
  size_t busy = n_conn;
  size_t& received = received_;
  std::vector<std::shared_ptr<std::function<void()>>> loops;
  for (size_t c = 0; c < n_conn; ++c) {
    Connection* cn = m.pool[c].get();
    auto read_more = std::make_shared<std::function<void()>>();
    loops.push_back(read_more);
    *read_more = [cn, read_more, &replies, &busy, &received]() {
      cn->socket.async_read_some(
          asio::buffer(cn->buf), [cn, read_more, &replies, &busy, &received](const boost::system::error_code& e, size_t n) {
            if (e) {
              cn->error = e == asio::error::eof ? "connection closed by the store" : e.message();
              --busy;
              return;
            }
            received += n;
            if (redisReaderFeed(cn->reader, cn->buf.data(), n) != REDIS_OK) {
              cn->error = "protocol error";
              --busy;
              return;
            }
            for (;;) {
              void* r = nullptr;
              if (redisReaderGetReply(cn->reader, &r) != REDIS_OK) {
                cn->error = std::string("protocol error: ") + cn->reader->errstr;
                --busy;
                return;
              }
              if (r == nullptr) break;
              if (cn->got < cn->slots.size()) replies[cn->slots[cn->got]] = copy_reply(static_cast<redisReply*>(r));
              ++cn->got;
              freeReplyObject(r);
            }
            if (cn->got >= cn->slots.size()) {
              --busy;
              return;
            }
            (*read_more)();
          });
    };
    asio::async_write(cn->socket, asio::buffer(cn->out),
                      [cn, read_more, &busy](const boost::system::error_code& e, size_t) {
                        if (e) {
                          cn->error = e.message();
                          --busy;
                          return;
                        }
                        (*read_more)();
                      });
  }
  m.io.restart();
  m.io.run_for(m.timeouts.io);
  const bool timed_out = busy > 0;
  std::string fault;
  for (size_t c = 0; c < n_conn; ++c) {
    Connection& cn = *m.pool[c];
    if (timed_out && fault.empty() && cn.got < cn.slots.size())
      fault = "no reply within " + std::to_string(m.timeouts.io.count()) + " ms";
    if (!cn.error.empty() && fault.empty()) fault = cn.error;
    if (timed_out || !cn.error.empty()) cn.reset();  // unread replies: start afresh
  }
  if (timed_out) {  // let the cancelled handlers run before the batch's state goes
    m.io.restart();
    m.io.run();
  }
  // Each read loop holds its own closure; break the cycles now that all are done.
  for (auto& f : loops) *f = nullptr;
  if (!fault.empty()) throw RedisError(where + ": " + fault);
  return replies;
}

}  // namespace vc
