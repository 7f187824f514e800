// Log-probabilities from `vericache serve`: /v1/completions `logprobs: N` (the
// legacy object: tokens, token_logprobs, top_logprobs as {text: logprob},
// text_offset) and /v1/chat/completions `logprobs: true` + `top_logprobs: N`
// (content entries with bytes and alternatives) hold the values `vericache generate
// --top-logprobs` prints; a stream's chunks carry them too and add up to the plain
// reply's; out-of-range or ill-typed counts get a 400 naming the parameter.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/cli/cli_support.hpp"
#include "tests/server/server_support.hpp"

namespace vc::test {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// `generate --json --top-logprobs N` on `prompt` (full mode: vericache must match it).
json generate_reference(const std::string& prompt, int max_tokens, int top_n) {
  const fs::path file = fs::temp_directory_path() / ("vc-lp-prompt-" + std::to_string(::getpid()));
  std::ofstream(file, std::ios::binary) << prompt;
  const CliRun r = run_vericache("generate --json --mode full --ignore-eos --prompt-file " +
                                     file.string() + " --max-tokens " + std::to_string(max_tokens) +
                                     " --top-logprobs " + std::to_string(top_n),
                                 false);
  fs::remove(file);
  EXPECT_EQ(r.code, 0) << r.out;
  return json::parse(r.out);
}

// The data events of a stream (checked to end with [DONE]), parsed.
std::vector<json> stream_events(const HttpResponse& r) {
  std::vector<std::string> raw = sse_events(r.body);
  EXPECT_FALSE(raw.empty());
  EXPECT_EQ(raw.back(), "[DONE]");
  std::vector<json> out;
  for (size_t i = 0; i + 1 < raw.size(); ++i) out.push_back(json::parse(raw[i]));
  return out;
}

bool near(double a, double b) { return std::abs(a - b) <= 1e-6; }

const std::string kPrompt = "<|begin_of_text|>def fibonacci(n):";

TEST(serve_logprobs, completions_logprobs_n_hold_generates_values_plain_and_streamed) {
  ServerProcess server;
  const int kTokens = 16;
  const json ref = generate_reference(kPrompt, kTokens, 5);
  json b = {{"prompt", kPrompt}, {"max_tokens", kTokens}, {"logprobs", 5},
            {"mode", "vericache"}, {"draft", 4},         {"ignore_eos", true}};
  const HttpResponse plain = http_request(server.port(), "POST", "/v1/completions", b.dump());
  ASSERT_EQ(plain.status, 200) << plain.body;
  const json choice = plain.json()["choices"][0];
  EXPECT_EQ(choice["text"], ref["text"]);
  const json& lp = choice["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), size_t(kTokens));
  ASSERT_EQ(lp["token_logprobs"].size(), size_t(kTokens));
  ASSERT_EQ(lp["top_logprobs"].size(), size_t(kTokens));
  ASSERT_EQ(lp["text_offset"].size(), size_t(kTokens));
  std::string joined;
  for (int i = 0; i < kTokens; ++i) {
    SCOPED_TRACE("token " + std::to_string(i));
    const std::string token = lp["tokens"][i];
    EXPECT_EQ(lp["text_offset"][i], joined.size());
    joined += token;
    const double chosen = lp["token_logprobs"][i];
    EXPECT_TRUE(near(chosen, ref["output_logprobs"][i].get<double>()));
    // {text: logprob}: at most 5 texts, each logprob one of generate's top 5, the
    // chosen (greedy: the most likely) token among them.
    const json& top = lp["top_logprobs"][i];
    ASSERT_TRUE(top.is_object());
    EXPECT_GE(top.size(), 1u);
    EXPECT_LE(top.size(), 5u);
    for (const auto& [text, value] : top.items()) {
      bool listed = false;
      for (const json& e : ref["output_top_logprobs"][i])
        listed = listed || near(value.get<double>(), e["logprob"].get<double>());
      EXPECT_TRUE(listed) << text << ": " << value;
    }
    ASSERT_TRUE(top.contains(token)) << top.dump();
    EXPECT_EQ(top[token].get<double>(), chosen);
  }
  EXPECT_EQ(joined, choice["text"]);
  // Each {text: logprob} object, read in the reply's own key order, lists the most
  // likely first (as OpenAI and vLLM write it), not alphabetically.
  const auto in_order = nlohmann::ordered_json::parse(plain.body);
  size_t unsorted_by_text = 0;
  for (const auto& top : in_order["choices"][0]["logprobs"]["top_logprobs"]) {
    double before = 0;
    std::string previous_text;
    bool first = true;
    for (auto it = top.begin(); it != top.end(); ++it) {
      if (!first) {
        EXPECT_LE(it.value().get<double>(), before) << top.dump();
        unsorted_by_text += it.key() < previous_text;
      }
      before = it.value().get<double>();
      previous_text = it.key();
      first = false;
    }
  }
  EXPECT_GT(unsorted_by_text, 0u) << "some list's likeliest-first order is not its text order";

  b["stream"] = true;
  const HttpResponse streamed = http_request(server.port(), "POST", "/v1/completions", b.dump());
  ASSERT_EQ(streamed.status, 200);
  json sum = {{"tokens", json::array()}, {"token_logprobs", json::array()},
              {"top_logprobs", json::array()}, {"text_offset", json::array()}};
  size_t carrying = 0;
  for (const json& e : stream_events(streamed)) {
    const json& c = e["choices"][0];
    if (c["logprobs"].is_null()) continue;
    ++carrying;
    for (const char* k : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
      for (const json& x : c["logprobs"][k]) sum[k].push_back(x);
  }
  EXPECT_GT(carrying, 1u) << "tokens stream in several chunks";
  EXPECT_EQ(sum, lp);
}

TEST(serve_logprobs, completions_logprobs_0_give_the_chosen_tokens_and_null_alternatives) {
  ServerProcess server;
  const json b = {{"prompt", kPrompt}, {"max_tokens", 6}, {"logprobs", 0}};
  const HttpResponse r = http_request(server.port(), "POST", "/v1/completions", b.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const json lp = r.json()["choices"][0]["logprobs"];
  EXPECT_EQ(lp["token_logprobs"].size(), 6u);
  EXPECT_TRUE(lp["top_logprobs"].is_null());
}

const json kMessages = json::array({{{"role", "user"}, {"content", "add two numbers"}}});
const std::string kRendered = "<|begin_of_text|># user: add two numbers\n# assistant:\n";

// A content entry's bytes are its token's UTF-8 bytes.
void expect_bytes_of(const json& entry) {
  const std::string token = entry["token"];
  ASSERT_EQ(entry["bytes"].size(), token.size()) << entry;
  for (size_t i = 0; i < token.size(); ++i)
    EXPECT_EQ(entry["bytes"][i].get<int>(), int(static_cast<unsigned char>(token[i]))) << entry;
}

TEST(serve_logprobs, chat_top_logprobs_hold_generates_values_plain_and_streamed) {
  ServerProcess server;
  const int kTokens = 14, kTop = 3;
  const json ref = generate_reference(kRendered, kTokens, kTop);
  json b = {{"messages", kMessages}, {"max_completion_tokens", kTokens}, {"logprobs", true},
            {"top_logprobs", kTop},  {"mode", "vericache"},             {"ignore_eos", true},
            {"temperature", 0}};
  const HttpResponse plain = http_request(server.port(), "POST", "/v1/chat/completions", b.dump());
  ASSERT_EQ(plain.status, 200) << plain.body;
  const json content = plain.json()["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), size_t(kTokens));
  for (int i = 0; i < kTokens; ++i) {
    SCOPED_TRACE("token " + std::to_string(i));
    const json& c = content[i];
    expect_bytes_of(c);
    EXPECT_TRUE(near(c["logprob"].get<double>(), ref["output_logprobs"][i].get<double>()));
    const json& top = c["top_logprobs"];
    ASSERT_EQ(top.size(), size_t(kTop));
    for (int k = 0; k < kTop; ++k) {
      expect_bytes_of(top[k]);
      EXPECT_TRUE(near(top[k]["logprob"].get<double>(),
                       ref["output_top_logprobs"][i][k]["logprob"].get<double>()));
    }
    EXPECT_EQ(top[0]["token"], c["token"]) << "greedy: the chosen token is the most likely";
    EXPECT_EQ(top[0]["logprob"], c["logprob"]);
  }

  b["stream"] = true;
  const HttpResponse streamed =
      http_request(server.port(), "POST", "/v1/chat/completions", b.dump());
  ASSERT_EQ(streamed.status, 200);
  json sum = json::array();
  std::string text;
  for (const json& e : stream_events(streamed)) {
    const json& c = e["choices"][0];
    text += c["delta"].value("content", "");
    if (!c["logprobs"].is_null())
      for (const json& x : c["logprobs"]["content"]) sum.push_back(x);
  }
  EXPECT_EQ(text, plain.json()["choices"][0]["message"]["content"]);
  EXPECT_EQ(sum, content);
}

TEST(serve_logprobs, chat_logprobs_without_alternatives_list_none) {
  ServerProcess server;
  const json b = {{"messages", kMessages}, {"max_tokens", 4}, {"logprobs", true}};
  const HttpResponse r = http_request(server.port(), "POST", "/v1/chat/completions", b.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const json content = r.json()["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 4u);
  for (const json& c : content) EXPECT_EQ(c["top_logprobs"], json::array());
}

TEST(serve_logprobs, bad_counts_get_400_naming_the_parameter) {
  ServerProcess server;
  auto expect_400 = [&](const std::string& path, const json& body, const std::string& param) {
    SCOPED_TRACE(path + " " + body.dump());
    const HttpResponse r = http_request(server.port(), "POST", path, body.dump());
    ASSERT_EQ(r.status, 400) << r.body;
    const json e = r.json()["error"];
    EXPECT_EQ(e["param"], param) << e;
    EXPECT_EQ(e["type"], "invalid_request_error");
    EXPECT_NE(e["message"].get<std::string>().find(param), std::string::npos) << e;
  };
  const std::string c = "/v1/completions", chat = "/v1/chat/completions";
  for (const json& v : {json(6), json(-1), json(true), json(2.5), json("3")})
    expect_400(c, {{"prompt", "x"}, {"logprobs", v}}, "logprobs");
  expect_400(c, {{"prompt", "x"}, {"top_logprobs", 2}}, "top_logprobs");  // a chat field
  for (const json& v : {json(21), json(-1), json("3"), json(1.5)})
    expect_400(chat, {{"messages", kMessages}, {"logprobs", true}, {"top_logprobs", v}},
               "top_logprobs");
  expect_400(chat, {{"messages", kMessages}, {"top_logprobs", 2}}, "top_logprobs");
  expect_400(chat, {{"messages", kMessages}, {"logprobs", false}, {"top_logprobs", 2}},
             "top_logprobs");
  expect_400(chat, {{"messages", kMessages}, {"logprobs", 1}}, "logprobs");
}

}  // namespace
}  // namespace vc::test
