// The throttling TCP proxy (see the header): one thread per direction of each
// connection, blocking sockets, 16 KiB reads; the pacing keeps one "link busy
// until" time for all connections, so their bytes share the rate.
#include "tools/vericache/throttled_proxy.hpp"

#include <cmath>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include "kernels/error.hpp"
#include "runtime/modelled_link.hpp"

namespace vc::cli {

namespace {

sockaddr_in loopback(int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

int connect_to(const std::string& host, int port) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_socktype = SOCK_STREAM;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0) return -1;
  int fd = -1;
  for (addrinfo* p = res; p != nullptr && fd < 0; p = p->ai_next) {
    fd = socket(p->ai_family, p->ai_socktype, p->ai_protocol);
    if (fd >= 0 && connect(fd, p->ai_addr, p->ai_addrlen) != 0) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  return fd;
}

// Each 16 KiB piece waits until its bytes have passed; the wake-up, the send and the
// next recv then take time a strict schedule loses every piece (the proxy read at 9.3
// of a nominal 12 MB/s). With 2 / 10 / 20 ms of slack the bench's 4 MiB probe read
// 10.7 / 10.9 / 11.1 MB/s (2-core VM); 10 ms is 120 KB of burst at that rate.
constexpr auto kPacingSlack = std::chrono::milliseconds(10);

}  // namespace

ThrottledProxy::ThrottledProxy(std::string upstream_host, int upstream_port, double bytes_per_second)
    : host_(std::move(upstream_host)), upstream_port_(upstream_port), rate_(bytes_per_second),
      pacer_(bytes_per_second, kPacingSlack, std::chrono::steady_clock::now()) {
  if (!(bytes_per_second >= 0) || !std::isfinite(bytes_per_second))
    throw Error(fmt::format("throttling proxy: the rate must be 0 (unthrottled) or positive and finite, "
                            "got {:g} bytes/s", bytes_per_second));
  listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a = loopback(0);
  socklen_t len = sizeof(a);
  if (listen_fd_ < 0 || bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      listen(listen_fd_, 16) != 0 ||
      getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    throw Error("throttling proxy for " + host_ + ":" + std::to_string(upstream_port_) +
                ": cannot listen on a loopback port");
  port_ = ntohs(a.sin_port);
  accept_thread_ = std::thread([this] { accept_loop(); });
}

ThrottledProxy::~ThrottledProxy() {
  stop_ = true;
  shutdown(listen_fd_, SHUT_RDWR);
  close(listen_fd_);
  accept_thread_.join();  // no pump is added from now on
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int fd : fds_) shutdown(fd, SHUT_RDWR);
  }
  for (auto& t : threads_) t.join();
  for (int fd : fds_) close(fd);
}

void ThrottledProxy::accept_loop() {
  while (!stop_) {
    const int client = accept(listen_fd_, nullptr, nullptr);
    if (client < 0) return;
    const int up = connect_to(host_, upstream_port_);
    if (up < 0) {
      close(client);
      continue;
    }
    std::lock_guard<std::mutex> lock(mu_);
    fds_.push_back(client);
    fds_.push_back(up);
    threads_.emplace_back([this, client, up] { pump(client, up, false); });
    threads_.emplace_back([this, client, up] { pump(up, client, true); });
  }
}

LinkPacer::Clock::time_point LinkPacer::reserve(size_t n, Clock::time_point now) {
  if (next_free_ < now - slack_) next_free_ = now - slack_;
  next_free_ = advance_saturated(next_free_, double(n) / rate_, now);
  return next_free_;
}

void ThrottledProxy::pace(size_t n) {
  if (rate_ <= 0) return;
  std::chrono::steady_clock::time_point until;
  {
    std::lock_guard<std::mutex> lock(mu_);
    until = pacer_.reserve(n, std::chrono::steady_clock::now());
  }
  std::this_thread::sleep_until(until);
}

void ThrottledProxy::pump(int from, int to, bool throttled) {
  std::vector<char> buf(16384);
  for (;;) {
    const ssize_t n = recv(from, buf.data(), buf.size(), 0);
    if (n <= 0) break;
    if (throttled) {
      pace(size_t(n));
      reply_bytes_ += size_t(n);
    }
    for (ssize_t sent = 0; sent < n;) {
      const ssize_t w = send(to, buf.data() + sent, size_t(n - sent), MSG_NOSIGNAL);
      if (w <= 0) {
        shutdown(from, SHUT_RDWR);
        return;
      }
      sent += w;
    }
  }
  shutdown(to, SHUT_RDWR);
}

}  // namespace vc::cli
