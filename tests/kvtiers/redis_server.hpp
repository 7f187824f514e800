// A throwaway redis-server for one test: started on a free loopback port with no
// persistence (--save '' --appendonly no), killed and reaped when the object goes.
// Tests use it to put the remote tier against a real store and to break that store
// (kill, SIGSTOP, FLUSHALL, overwritten values). available() is false, with a reason,
// when no redis-server binary is installed: the test must then GTEST_SKIP, never pass.
#pragma once
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace vc::test {

class RedisServer {
 public:
  RedisServer() {
    for (const char* p : {"/usr/bin/redis-server", "/usr/local/bin/redis-server"})
      if (access(p, X_OK) == 0) binary_ = p;
    if (binary_.empty()) {
      reason_ = "redis-server is not installed (apt-get install redis-server; tools/setup.sh does)";
      return;
    }
    start();
  }
  ~RedisServer() { kill(); }
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  [[nodiscard]] bool available() const { return pid_ > 0; }
  [[nodiscard]] const std::string& reason() const { return reason_; }
  [[nodiscard]] int port() const { return port_; }
  [[nodiscard]] std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }

  /// SIGKILL and reap: the store is down (its port refuses connections).
  void kill() {
    if (pid_ <= 0) return;
    resume();
    ::kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
  }
  /// SIGSTOP: the store accepts connections (the kernel does) but never answers.
  void pause() {
    if (pid_ > 0 && !paused_) ::kill(pid_, SIGSTOP), paused_ = true;
  }
  void resume() {
    if (pid_ > 0 && paused_) ::kill(pid_, SIGCONT), paused_ = false;
  }
  /// Starts a fresh (empty) server on the same port.
  void restart() {
    kill();
    start(port_);
  }

 private:
  static int free_port() {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    socklen_t len = sizeof(a);
    if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      close(fd);
      return -1;
    }
    close(fd);
    return ntohs(a.sin_port);
  }
  static bool connectable(int port) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(uint16_t(port));
    const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
    close(fd);
    return ok;
  }
  void start(int port = 0) {
    port_ = port > 0 ? port : free_port();
    if (port_ <= 0) {
      reason_ = "no free loopback port for redis-server";
      return;
    }
    const std::string p = std::to_string(port_);
    std::vector<std::string> args = {binary_, "--port", p, "--bind", "127.0.0.1", "--save", "",
                                     "--appendonly", "no", "--protected-mode", "no",
                                     "--loglevel", "warning", "--logfile", "/dev/null"};
    std::vector<char*> argv;
    for (std::string& s : args) argv.push_back(s.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    pid_t pid = -1;
    const int rc = posix_spawn(&pid, binary_.c_str(), &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
      reason_ = "cannot start " + binary_;
      return;
    }
    pid_ = pid;
    for (int i = 0; i < 500; ++i) {  // up to 5 s
      if (connectable(port_)) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    kill();
    reason_ = "redis-server did not listen on port " + p + " within 5 s";
  }

  std::string binary_, reason_;
  int port_ = -1;
  pid_t pid_ = -1;
  bool paused_ = false;
};

}  // namespace vc::test

/// Skips the test, saying why, when no redis-server could be started.
#define VC_REQUIRE_REDIS(server)                                  \
  do {                                                            \
    if (!(server).available()) GTEST_SKIP() << (server).reason(); \
  } while (0)
