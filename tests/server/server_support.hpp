// Running `vericache serve` in the server tests: start it on a free loopback port
// (--port 0; the port is read from its first line of output), stop it with a
// signal, and talk HTTP/1.1 (or 1.0) to it over a plain POSIX socket.
#pragma once
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

namespace vc::test {

/// A `vericache serve` child process.
class ServerProcess {
 public:
  /// Starts `vericache serve --port 0 ARGS` (with the bundled model unless ARGS name
  /// a --model); waits until it listens.
  explicit ServerProcess(const std::vector<std::string>& args = {}) {
    int out[2];
    if (::pipe(out) != 0) throw std::runtime_error("pipe failed");
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(out[1], 1);
      ::close(out[0]);
      ::close(out[1]);
      std::vector<std::string> all = {VC_CLI_PATH, "serve", "--port", "0"};
      if (std::find(args.begin(), args.end(), "--model") == args.end()) {
        all.push_back("--model");
        all.push_back(VC_MODEL_DIR);
      }
      all.insert(all.end(), args.begin(), args.end());
      std::vector<char*> argv;
      for (auto& a : all) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(out[1]);
    out_ = ::fdopen(out[0], "r");
    char line[512];
    if (std::fgets(line, sizeof line, out_) == nullptr)
      throw std::runtime_error("vericache serve exited before listening");
    first_line_ = line;
    const size_t colon = first_line_.find(':', first_line_.find("//"));
    port_ = std::stoi(first_line_.substr(colon + 1));
  }
  ~ServerProcess() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (out_ != nullptr) std::fclose(out_);
  }
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  [[nodiscard]] int port() const { return port_; }
  void signal(int signo) const { ::kill(pid_, signo); }
  /// Waits for the process to end (at most `seconds`); its exit status, or -1.
  int wait_exit(double seconds) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < end) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }

 private:
  pid_t pid_ = -1;
  FILE* out_ = nullptr;
  int port_ = 0;
  std::string first_line_;
};

/// One HTTP response.
struct HttpResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;  // de-chunked, or (no length, not chunked) read until the close
  [[nodiscard]] nlohmann::json json() const { return nlohmann::json::parse(body); }
};

/// A keep-alive HTTP/1.1 connection to 127.0.0.1:port.
class HttpConnection {
 public:
  explicit HttpConnection(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(uint16_t(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
      throw std::runtime_error("cannot connect to port " + std::to_string(port));
  }
  ~HttpConnection() { close(); }
  HttpConnection(const HttpConnection&) = delete;
  HttpConnection& operator=(const HttpConnection&) = delete;

  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  /// The protocol version requests are sent with ("HTTP/1.1" unless set).
  void set_version(std::string version) { version_ = std::move(version); }
  /// Shuts down the sending half (as `nc -N` does after its input): the server reads
  /// the end of the stream, this side can still read.
  void shutdown_write() { ::shutdown(fd_, SHUT_WR); }
  /// read() gives up (status 0) when nothing arrives for `seconds`, so that a test
  /// of a server that never answers fails instead of hanging.
  void set_read_timeout(double seconds) {
    timeval t{time_t(seconds), suseconds_t((seconds - double(time_t(seconds))) * 1e6)};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &t, sizeof t);
  }
  /// Sends a request (Content-Length set when there is a body).
  void send(const std::string& method, const std::string& path, const std::string& body = "",
            const std::vector<std::string>& headers = {}) {
    std::string r = method + " " + path + " " + version_ + "\r\nHost: 127.0.0.1\r\n";
    for (const auto& h : headers) r += h + "\r\n";
    if (!body.empty() || method == "POST")
      r += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
           "\r\n";
    r += "\r\n" + body;
    send_raw(r);
  }
  void send_raw(const std::string& bytes) {
    size_t off = 0;
    while (off < bytes.size()) {
      const ssize_t n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n <= 0) throw std::runtime_error("send failed");
      off += size_t(n);
    }
  }
  /// Reads one whole response (status 0 when the connection closed first), skipping
  /// interim 1xx responses as HTTP/1.1 clients do.
  HttpResponse read() {
    HttpResponse r;
    std::string head;
    do {
      if (!read_until("\r\n\r\n", head)) return r;
      r.status = std::stoi(head.substr(head.find(' ') + 1, 3));
    } while (r.status >= 100 && r.status < 200 && r.status != 101);
    size_t pos = head.find("\r\n") + 2;
    while (pos < head.size()) {
      size_t end = head.find("\r\n", pos);
      if (end == std::string::npos) end = head.size();
      const std::string line = head.substr(pos, end - pos);
      pos = end + 2;
      const size_t c = line.find(':');
      if (c == std::string::npos) continue;
      std::string name = line.substr(0, c);
      for (char& ch : name) ch = char(std::tolower(ch));
      r.headers[name] = line.substr(line.find_first_not_of(' ', c + 1));
    }
    const auto header = [&](const std::string& name) {
      const auto it = r.headers.find(name);
      return it == r.headers.end() ? std::string() : it->second;
    };
    if (header("transfer-encoding") == "chunked") {
      for (;;) {
        std::string size_line;
        if (!read_until("\r\n", size_line)) break;
        const size_t n = std::stoul(size_line, nullptr, 16);
        std::string chunk;
        if (!read_exact(n + 2, chunk)) break;
        if (n == 0) break;
        r.body += chunk.substr(0, n);
      }
    } else if (r.headers.count("content-length")) {
      (void)read_exact(std::stoul(header("content-length")), r.body);
    } else {  // close-delimited (an HTTP/1.0 stream): everything until the peer closes
      while (fill()) {
      }
      r.body = std::move(pending_);
      pending_.clear();
    }
    return r;
  }
  /// Sends and reads.
  HttpResponse request(const std::string& method, const std::string& path,
                       const std::string& body = "", const std::vector<std::string>& headers = {}) {
    send(method, path, body, headers);
    return read();
  }
  /// True when the server closed the connection (waits up to `seconds`).
  bool closed_by_peer(double seconds) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, int(seconds * 1000)) <= 0) return false;
    char c;
    return ::recv(fd_, &c, 1, MSG_PEEK) == 0;
  }

 private:
  bool fill() {
    char buf[4096];
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n <= 0) return false;
    pending_.append(buf, size_t(n));
    return true;
  }
  bool read_until(const std::string& delim, std::string& out) {
    for (;;) {
      const size_t at = pending_.find(delim);
      if (at != std::string::npos) {
        out = pending_.substr(0, at);
        pending_.erase(0, at + delim.size());
        return true;
      }
      if (!fill()) return false;
    }
  }
  bool read_exact(size_t n, std::string& out) {
    while (pending_.size() < n)
      if (!fill()) return false;
    out = pending_.substr(0, n);
    pending_.erase(0, n);
    return true;
  }
  int fd_ = -1;
  std::string version_ = "HTTP/1.1";
  std::string pending_;
};

/// One request on a fresh connection.
inline HttpResponse http_request(int port, const std::string& method, const std::string& path,
                                 const std::string& body = "",
                                 const std::vector<std::string>& headers = {}) {
  HttpConnection c(port);
  return c.request(method, path, body, headers);
}

/// The `data:` payloads of a server-sent event stream, in order.
inline std::vector<std::string> sse_events(const std::string& body) {
  std::vector<std::string> events;
  size_t pos = 0;
  while ((pos = body.find("data: ", pos)) != std::string::npos) {
    const size_t end = body.find("\n\n", pos);
    events.push_back(body.substr(pos + 6, end - pos - 6));
    pos = end;
  }
  return events;
}

/// A copy of the bundled model (its files linked) whose tokenizer_config.json holds
/// `chat_template` and the special tokens given; removed with the object.
class ModelWithTemplate {
 public:
  ModelWithTemplate(const std::string& name, const std::string& chat_template,
                    const std::string& bos_token = "", const std::string& eos_token = "")
      : dir_(std::filesystem::temp_directory_path() /
             ("vc-model-" + name + "-" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    for (const char* f : {"config.json", "model.safetensors", "tokenizer.json"})
      std::filesystem::create_symlink(std::filesystem::path(VC_MODEL_DIR) / f, dir_ / f);
    std::ofstream(dir_ / "tokenizer_config.json")
        << nlohmann::json{{"chat_template", chat_template},
                          {"bos_token", bos_token},
                          {"eos_token", eos_token}}
               .dump();
  }
  ~ModelWithTemplate() { std::filesystem::remove_all(dir_); }
  ModelWithTemplate(const ModelWithTemplate&) = delete;
  ModelWithTemplate& operator=(const ModelWithTemplate&) = delete;
  /// serve's arguments for it, served under the bundled model's name.
  [[nodiscard]] std::vector<std::string> serve_args() const {
    return {"--model", dir_.string(), "--served-model-name", "tinycode"};
  }

 private:
  std::filesystem::path dir_;
};

}  // namespace vc::test
