// `vericache` on the disk full tier as users run it: two processes sharing one
// --disk-dir, foreign files in it, and what is left in it after a normal exit, an
// error, and SIGTERM or SIGINT sent to a running `generate` or `batch`.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

extern char** environ;

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/vc-cli-disk-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp failed");
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Every entry of `dir` with its contents ("<dir>" for a directory).
std::map<std::string, std::string> listing(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    out[e.path().filename().string()] = e.is_regular_file() ? slurp(e.path()) : "<dir>";
  return out;
}

// Foreign files a user keeps in the disk directory, among them one named like a
// tier file.
std::map<std::string, std::string> add_foreign_files(const std::string& dir) {
  std::ofstream(dir + "/req-1.kv") << "the user's own req-1.kv";
  std::ofstream(dir + "/notes.txt") << "notes";
  return listing(dir);
}

// A running `vericache` with stdout and stderr in files.
struct Child {
  pid_t pid = -1;
  std::string out_path, err_path;

  Child(const std::vector<std::string>& args, const std::string& out_dir, const std::string& tag)
      : out_path(out_dir + "/" + tag + ".out"), err_path(out_dir + "/" + tag + ".err") {
    std::vector<std::string> argv_s = {VC_CLI_PATH};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawnattr_t at;
    posix_spawnattr_init(&at);
    sigset_t none, defaults;
    sigemptyset(&none);
    sigemptyset(&defaults);
    for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&defaults, s);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &defaults);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    if (posix_spawn(&pid, argv[0], &fa, &at, argv.data(), environ) != 0) pid = -1;
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
  }
  ~Child() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
  // The wait status.
  int wait() {
    int status = 0;
    ::waitpid(pid, &status, 0);
    pid = -1;
    return status;
  }
  [[nodiscard]] std::string out() const { return slurp(out_path); }
  [[nodiscard]] std::string err() const { return slurp(err_path); }
};

// Waits until a tier's private dir in `dir` holds a KV file (or the child exits /
// 120 s).
bool wait_for_kv_file(const std::string& dir, const Child& c) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline) {
    try {  // entries come and go while we look
      for (const auto& e : fs::recursive_directory_iterator(dir))
        if (e.path().parent_path().filename().string().rfind("vericache-kv-", 0) == 0 &&
            e.path().filename().string().rfind("req-", 0) == 0)
          return true;
    } catch (const fs::filesystem_error&) {
    }
    if (::waitpid(c.pid, nullptr, WNOHANG) != 0) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

std::vector<std::string> generate_args(const std::string& disk_dir, int max_tokens) {
  return {"generate", "--prompt", "<|begin_of_text|>class Stack:\n    def push(self, item):",
          "--max-tokens", std::to_string(max_tokens), "--ignore-eos", "--json", "--logprobs",
          "--mode", "vericache", "--compressor", "h2o", "--draft", "8", "--full-tier", "disk",
          "--disk-dir", disk_dir};
}

TEST(cli_disk_tier, two_processes_sharing_a_disk_dir_both_succeed_with_equal_output) {
  TempDir d;
  const std::string disk = d.path + "/disk";
  fs::create_directory(disk);
  const auto foreign = add_foreign_files(disk);
  Child a(generate_args(disk, 96), d.path, "a"), b(generate_args(disk, 96), d.path, "b");
  ASSERT_GT(a.pid, 0);
  ASSERT_GT(b.pid, 0);
  const int sa = a.wait(), sb = b.wait();
  ASSERT_TRUE(WIFEXITED(sa) && WEXITSTATUS(sa) == 0) << a.err();
  ASSERT_TRUE(WIFEXITED(sb) && WEXITSTATUS(sb) == 0) << b.err();
  const json ja = json::parse(a.out()), jb = json::parse(b.out());
  EXPECT_EQ(ja["output_ids"].size(), 96u);
  EXPECT_EQ(ja["output_ids"], jb["output_ids"]);
  EXPECT_EQ(ja["output_logprobs"].dump(), jb["output_logprobs"].dump());
  EXPECT_EQ(ja["stats"]["vericache"]["full_tier"], "disk");
  // Normal exit: nothing of either process is left; the user's files are unchanged.
  EXPECT_EQ(listing(disk), foreign);
}

TEST(cli_disk_tier, an_error_after_the_tier_was_made_leaves_only_the_foreign_files) {
  TempDir d;
  const std::string disk = d.path + "/disk";
  fs::create_directory(disk);
  const auto foreign = add_foreign_files(disk);
  std::ofstream(d.path + "/in.jsonl")
      << R"({"prompt": "def f(x):", "max_tokens": 12, "mode": "vericache", "ignore_eos": true})"
      << "\n";
  // The trace is written after every request ran on the disk tier, and fails.
  Child c({"batch", "--input", d.path + "/in.jsonl", "--output", d.path + "/out.jsonl",
           "--full-tier", "disk", "--disk-dir", disk, "--trace", d.path + "/missing/trace.json"},
          d.path, "c");
  const int st = c.wait();
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 1) << c.err();
  EXPECT_NE(c.err().find("--trace"), std::string::npos) << c.err();
  EXPECT_EQ(listing(disk), foreign);
}

// Sends `signo` to a running command once its tier holds KV: the exit status is
// 128 + signo and only the foreign files remain.
void expect_signal_cleans_up(const std::string& command, int signo) {
  SCOPED_TRACE(command + " " + strsignal(signo));
  TempDir d;
  const std::string disk = d.path + "/disk";
  fs::create_directory(disk);
  const auto foreign = add_foreign_files(disk);
  std::vector<std::string> args;
  if (command == "generate") {
    args = generate_args(disk, 20000);
  } else {
    std::ofstream in(d.path + "/in.jsonl");
    for (int i = 0; i < 4; ++i)
      in << R"({"prompt": "def f)" << i
         << R"((x):", "max_tokens": 5000, "mode": "vericache", "ignore_eos": true})" << "\n";
    in.close();
    args = {"batch", "--input", d.path + "/in.jsonl", "--output", d.path + "/out.jsonl",
            "--concurrency", "4", "--full-tier", "disk", "--disk-dir", disk};
  }
  Child c(args, d.path, "c");
  ASSERT_GT(c.pid, 0);
  ASSERT_TRUE(wait_for_kv_file(disk, c)) << c.err();
  ASSERT_EQ(::kill(c.pid, signo), 0);
  const int st = c.wait();
  ASSERT_TRUE(WIFEXITED(st)) << "killed by the signal instead of exiting";
  EXPECT_EQ(WEXITSTATUS(st), 128 + signo) << c.err();
  EXPECT_NE(c.err().find("interrupted by"), std::string::npos) << c.err();
  EXPECT_EQ(listing(disk), foreign);
}

TEST(cli_disk_tier, sigterm_to_a_running_generate_exits_143_and_removes_its_scratch) {
  expect_signal_cleans_up("generate", SIGTERM);
}

TEST(cli_disk_tier, sigint_to_a_running_generate_exits_130_and_removes_its_scratch) {
  expect_signal_cleans_up("generate", SIGINT);
}

TEST(cli_disk_tier, sigterm_to_a_running_batch_exits_143_and_removes_its_scratch) {
  expect_signal_cleans_up("batch", SIGTERM);
}

TEST(cli_disk_tier, sigint_to_a_running_batch_exits_130_and_removes_its_scratch) {
  expect_signal_cleans_up("batch", SIGINT);
}

TEST(cli_disk_tier, sighup_to_a_running_batch_exits_129_and_removes_its_scratch) {
  expect_signal_cleans_up("batch", SIGHUP);
}

}  // namespace
