// `cache stats` and `cache clear` walk the store's keys with SCAN until the cursor
// comes back as 0. A server that speaks the protocol but hands out a cursor twice
// (a broken proxy, a toy store) would keep them looping forever; they stop with an
// error naming the store and the cursor instead.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>

#include "kvtiers/remote/remote_tier.hpp"
#include "tests/error_naming.hpp"

namespace vc {
namespace {

// A loopback server answering every command with `reply`, one connection at a time.
class LoopingStore {
 public:
  explicit LoopingStore(std::string reply) : reply_(std::move(reply)) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    EXPECT_EQ(listen(fd_, 4), 0);
    EXPECT_EQ(getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len), 0);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~LoopingStore() {
    stop_ = true;
    shutdown(fd_, SHUT_RDWR);
    close(fd_);
    thread_.join();
  }
  [[nodiscard]] std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }

 private:
  void serve() {
    while (!stop_) {
      const int c = accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      char buf[4096];
      // Each read holds at least one command (the client waits for each reply).
      while (recv(c, buf, sizeof(buf), 0) > 0)
        if (send(c, reply_.data(), reply_.size(), MSG_NOSIGNAL) <= 0) break;
      close(c);
    }
  }
  std::string reply_;
  int fd_ = -1, port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

TEST(remote_store_scan, a_store_repeating_a_scan_cursor_is_an_error_not_an_endless_walk) {
  // SCAN's reply: cursor "1" and no keys, whatever was asked.
  LoopingStore store("*2\r\n$1\r\n1\r\n*0\r\n");
  const RedisEndpoint ep = parse_redis_url(store.url());
  test::expect_error_naming([&] { (void)remote_store_stats(ep); },
                            "SCAN returned cursor 1 twice; its iteration would not end");
  test::expect_error_naming([&] { (void)remote_store_clear(ep); }, "SCAN returned cursor 1 twice");
}

}  // namespace
}  // namespace vc
