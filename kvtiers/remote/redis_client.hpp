// A small Redis-protocol client: Boost.Asio sockets, hiredis's reply reader
// (hiredis/read.h) fed with the bytes the sockets read, commands formatted by
// hiredis. Commands are pipelined: a batch is spread over a pool of connections,
// every command written at once and the replies read back in order, all
// asynchronously on one io_context. Connect and each batch have deadlines.
//
// Errors: a store that cannot be reached, a deadline passed, a dropped connection or
// a protocol error throws RedisError with one line naming the store; the connection
// concerned is closed and reconnected by the next batch. Not thread-safe: one owner.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/error.hpp"

namespace vc {

/// A fault of the store or the link (not a bad request of ours).
class RedisError : public Error {
 public:
  using Error::Error;
};

struct RedisEndpoint {
  std::string host;
  uint16_t port = 6379;
  [[nodiscard]] std::string url() const { return "redis://" + host + ":" + std::to_string(port); }
};

/// Parses "redis://HOST[:PORT]" (port 6379 by default; HOST may be a bracketed IPv6
/// address). Throws vc::Error with one line naming the URL otherwise.
[[nodiscard]] RedisEndpoint parse_redis_url(const std::string& url);

struct RedisTimeouts {
  std::chrono::milliseconds connect{1000};
  std::chrono::milliseconds io{5000};  // one whole batch, writes and reads
};

/// One reply, copied out of hiredis's reply object.
struct RedisReply {
  enum class Type { nil, string, integer, status, error, array };
  Type type = Type::nil;
  std::string str;  // string, status, error
  long long integer = 0;
  std::vector<RedisReply> elements;  // array
  [[nodiscard]] bool is_nil() const { return type == Type::nil; }
};

using RedisCommand = std::vector<std::string>;

class RedisClient {
 public:
  RedisClient(RedisEndpoint endpoint, RedisTimeouts timeouts = {}, size_t connections = 2);
  ~RedisClient();
  RedisClient(const RedisClient&) = delete;
  RedisClient& operator=(const RedisClient&) = delete;

  /// Runs `commands` pipelined over the pool (command i on connection i % pool) and
  /// returns their replies in order. Throws RedisError on any transport fault.
  [[nodiscard]] std::vector<RedisReply> pipeline(const std::vector<RedisCommand>& commands);
  /// One command.
  [[nodiscard]] RedisReply command(const RedisCommand& cmd);

  [[nodiscard]] const RedisEndpoint& endpoint() const { return endpoint_; }
  /// Deadlines of the next batches.
  void set_timeouts(RedisTimeouts t);
  /// Bytes read from the sockets so far (replies, protocol included).
  [[nodiscard]] size_t bytes_received() const { return received_; }

 private:
  struct Impl;
  RedisEndpoint endpoint_;
  std::unique_ptr<Impl> impl_;
  size_t received_ = 0;
};

}  // namespace vc
