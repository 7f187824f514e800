// An in-process TCP proxy on a loopback port in front of a store, for transfer
// faults: it forwards both ways, and on the store-to-client side it can drop the
// connection after a number of bytes, flip one byte at an offset, or delay replies. Threads and
// sockets end with the object.
#pragma once
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <mutex>
#include <thread>
#include <vector>

namespace vc::test {

class TcpProxy {
 public:
  struct Faults {
    size_t drop_after = 0;   // close both sides once this many reply bytes went through (0: never)
    size_t flip_at = 0;      // XOR 0x01 into reply byte number flip_at - 1 (0: never)
    std::chrono::milliseconds reply_delay{0};  // each read of reply bytes waits this long first
  };

  TcpProxy(int upstream_port, Faults f) : upstream_(upstream_port), faults_(f) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a = loopback(0);
    socklen_t len = sizeof(a);
    const int one = 1;
    setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || listen(listen_fd_, 16) != 0 ||
        getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      return;
    port_ = ntohs(a.sin_port);
    threads_.emplace_back([this] { accept_loop(); });
  }
  ~TcpProxy() {
    stop_ = true;
    shutdown(listen_fd_, SHUT_RDWR);
    close(listen_fd_);
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (int fd : fds_) shutdown(fd, SHUT_RDWR);
    }
    for (auto& t : threads_) t.join();
    for (int fd : fds_) close(fd);
  }
  TcpProxy(const TcpProxy&) = delete;
  TcpProxy& operator=(const TcpProxy&) = delete;

  [[nodiscard]] int port() const { return port_; }
  [[nodiscard]] std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }
  /// Reply bytes forwarded so far, over every connection.
  [[nodiscard]] size_t reply_bytes() const { return reply_bytes_; }

 private:
  static sockaddr_in loopback(int port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(uint16_t(port));
    return a;
  }
  void accept_loop() {
    while (!stop_) {
      const int client = accept(listen_fd_, nullptr, nullptr);
      if (client < 0) return;
      const int store = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a = loopback(upstream_);
      if (connect(store, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
        close(client);
        close(store);
        continue;
      }
      std::lock_guard<std::mutex> lock(mu_);
      fds_.push_back(client);
      fds_.push_back(store);
      threads_.emplace_back([this, client, store] { pump(client, store, false); });
      threads_.emplace_back([this, client, store] { pump(store, client, true); });
    }
  }
  void pump(int from, int to, bool reply) {
    char buf[16384];
    for (;;) {
      const ssize_t n = read(from, buf, sizeof(buf));
      if (n <= 0) break;
      size_t m = size_t(n);
      if (reply && faults_.reply_delay.count() > 0) std::this_thread::sleep_for(faults_.reply_delay);
      if (reply) {
        const size_t before = reply_bytes_.fetch_add(m);
        if (faults_.flip_at > before && faults_.flip_at <= before + m) buf[faults_.flip_at - 1 - before] ^= 0x01;
        if (faults_.drop_after > 0 && before + m >= faults_.drop_after) {
          m = faults_.drop_after > before ? faults_.drop_after - before : 0;
          if (m > 0) (void)!write(to, buf, m);
          break;
        }
      }
      if (write(to, buf, m) != ssize_t(m)) break;
    }
    shutdown(from, SHUT_RDWR);
    shutdown(to, SHUT_RDWR);
  }

  int upstream_, listen_fd_ = -1, port_ = -1;
  Faults faults_;
  std::atomic<bool> stop_{false};
  std::atomic<size_t> reply_bytes_{0};
  std::mutex mu_;
  std::vector<int> fds_;
  std::vector<std::thread> threads_;
};

}  // namespace vc::test
