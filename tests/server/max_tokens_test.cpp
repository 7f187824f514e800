// How `vericache serve` picks a request's output length: a request that sends no
// max_tokens gets --default-max-tokens cut to the room its prompt leaves in the
// context; in chat, max_completion_tokens wins over max_tokens, each is checked on
// its own, and an error names the field that was wrong.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/server/server_support.hpp"

namespace vc::test {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr int kContext = 256;

// The bundled model with a context of kContext positions (its other files linked),
// so that a prompt can nearly fill it without a long prefill; removed with the object.
class SmallContextModel {
 public:
  SmallContextModel() : dir_(fs::temp_directory_path() / ("vc-model-ctx-" + std::to_string(::getpid()))) {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    for (const char* f : {"model.safetensors", "tokenizer.json", "tokenizer_config.json"})
      fs::create_symlink(fs::path(VC_MODEL_DIR) / f, dir_ / f);
    json config = json::parse(std::ifstream(fs::path(VC_MODEL_DIR) / "config.json"));
    config["max_position_embeddings"] = kContext;
    std::ofstream(dir_ / "config.json") << config.dump();
  }
  ~SmallContextModel() { fs::remove_all(dir_); }
  SmallContextModel(const SmallContextModel&) = delete;
  SmallContextModel& operator=(const SmallContextModel&) = delete;
  [[nodiscard]] std::vector<std::string> serve_args() const {
    return {"--model", dir_.string(), "--served-model-name", "tinycode"};
  }

 private:
  fs::path dir_;
};

json error_of(const HttpResponse& r) {
  EXPECT_EQ(r.status, 400) << r.body;
  return json::parse(r.body).at("error");
}

const json kMessages = json::array({{{"role", "user"}, {"content", "add two numbers"}}});

TEST(serve_max_tokens, a_prompt_without_max_tokens_gets_the_room_left_in_the_context) {
  const SmallContextModel model;
  ServerProcess server(model.serve_args());  // --default-max-tokens 128
  const int prompt = kContext - 56;
  const json b = {{"prompt", std::vector<int>(prompt, 100)}, {"ignore_eos", true},
                  {"mode", "full"}};
  const HttpResponse r = http_request(server.port(), "POST", "/v1/completions", b.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json()["usage"]["prompt_tokens"], prompt);
  EXPECT_EQ(r.json()["usage"]["completion_tokens"], 56);
  EXPECT_EQ(r.json()["choices"][0]["finish_reason"], "length");

  // A max_tokens the client sends is not cut: too many is a 400 naming it.
  json explicit_too_many = b;
  explicit_too_many["max_tokens"] = 57;
  const json e = error_of(
      http_request(server.port(), "POST", "/v1/completions", explicit_too_many.dump()));
  EXPECT_EQ(e["param"], "max_tokens") << e["message"];
  EXPECT_NE(e["message"].get<std::string>().find("1..56"), std::string::npos) << e["message"];
}

TEST(serve_max_tokens, chat_max_completion_tokens_wins_over_max_tokens) {
  ServerProcess server;
  const json b = {{"messages", kMessages}, {"max_tokens", 5}, {"max_completion_tokens", 3},
                  {"ignore_eos", true}};
  const HttpResponse r = http_request(server.port(), "POST", "/v1/chat/completions", b.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json()["usage"]["completion_tokens"], 3);
}

TEST(serve_max_tokens, chat_checks_both_lengths_each_naming_its_own_field) {
  const SmallContextModel model;
  std::vector<std::string> args = model.serve_args();
  args.insert(args.end(), {"--max-tokens-limit", "250"});
  ServerProcess server(args);
  const std::vector<std::pair<json, std::string>> cases = {
      {{{"max_completion_tokens", 251}, {"max_tokens", 5}}, "max_completion_tokens"},
      {{{"max_completion_tokens", 0}, {"max_tokens", 5}}, "max_completion_tokens"},
      {{{"max_completion_tokens", 5}, {"max_tokens", 251}}, "max_tokens"},
      {{{"max_completion_tokens", 5}, {"max_tokens", "5"}}, "max_tokens"},
      // Within the server's limit, beyond the room the prompt (15 tokens) leaves.
      {{{"max_completion_tokens", 245}}, "max_completion_tokens"},
      {{{"max_completion_tokens", 5}, {"max_tokens", 245}}, "max_tokens"},
  };
  for (const auto& [lengths, param] : cases) {
    json b = lengths;
    b["messages"] = kMessages;
    SCOPED_TRACE(b.dump());
    const json e = error_of(http_request(server.port(), "POST", "/v1/chat/completions", b.dump()));
    EXPECT_EQ(e["param"], param) << e["message"];
    EXPECT_NE(e["message"].get<std::string>().find(param), std::string::npos) << e["message"];
  }
}

}  // namespace
}  // namespace vc::test
