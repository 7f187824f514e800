// Reading a request with a deadline: a Beast SyncReadStream over a blocking socket
// whose reads wait (poll) at most until a deadline, then fail with
// beast::error::timeout. Blocking Asio reads have no timeout of their own (and
// SO_RCVTIMEO only turns into an endless poll inside Asio), so the wait happens
// here, before each read. Only the reads of a request go through it; replies and
// streams write to the socket directly and have no deadline. Included by
// http_server.cpp only.
#pragma once
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/error.hpp>

namespace vc::server {

class DeadlineReader {
 public:
  using clock = std::chrono::steady_clock;

  explicit DeadlineReader(boost::asio::ip::tcp::socket& s) : s_(s) {}

  /// Reads from now on fail with beast::error::timeout once `d` has passed.
  void expire_at(clock::time_point d) { deadline_ = d; }
  /// Bytes read since the last reset_count().
  [[nodiscard]] size_t bytes_read() const { return bytes_; }
  void reset_count() { bytes_ = 0; }

  template <class MutableBufferSequence>
  size_t read_some(const MutableBufferSequence& buffers, boost::beast::error_code& ec) {
    if (!wait_readable(ec)) return 0;
    const size_t n = s_.read_some(buffers, ec);
    bytes_ += n;
    return n;
  }

  template <class MutableBufferSequence>
  size_t read_some(const MutableBufferSequence& buffers) {
    boost::beast::error_code ec;
    const size_t n = read_some(buffers, ec);
    if (ec) throw boost::system::system_error(ec);
    return n;
  }

 private:
  // True once the socket has bytes (or an end, or an error) to read.
  bool wait_readable(boost::beast::error_code& ec) {
    for (;;) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline_ - clock::now());
      if (left.count() <= 0) {
        ec = boost::beast::error::timeout;
        return false;
      }
      pollfd p{s_.native_handle(), POLLIN, 0};
      const int r = ::poll(&p, 1, int(std::min<int64_t>(left.count(), 60'000)));
      if (r > 0) return true;
      if (r < 0 && errno != EINTR) {
        ec.assign(errno, boost::system::system_category());
        return false;
      }
    }
  }

  boost::asio::ip::tcp::socket& s_;
  clock::time_point deadline_ = clock::time_point::max();
  size_t bytes_ = 0;
};

}  // namespace vc::server
