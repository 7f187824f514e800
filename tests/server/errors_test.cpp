// `vericache serve` refuses bad requests the way OpenAI clients expect: a JSON
// error object (message, type, param, code) and the fitting status.
#include <gtest/gtest.h>

#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "tests/cli/cli_support.hpp"
#include "tests/server/server_support.hpp"

namespace vc::test {
namespace {

using nlohmann::json;

// Checks the shape of an error reply (its keys in OpenAI's order) and returns its
// "error" object.
json error_of(const HttpResponse& r, int status) {
  EXPECT_EQ(r.status, status) << r.body;
  const auto in_order = nlohmann::ordered_json::parse(r.body).at("error");
  std::vector<std::string> keys;
  for (auto it = in_order.begin(); it != in_order.end(); ++it) keys.push_back(it.key());
  EXPECT_EQ(keys, (std::vector<std::string>{"message", "type", "param", "code"})) << r.body;
  const json e = json::parse(r.body).at("error");
  EXPECT_TRUE(e.at("message").is_string());
  EXPECT_TRUE(e.at("type").is_string());
  return e;
}

TEST(serve_errors, bad_requests_get_400_naming_the_field) {
  ServerProcess server({"--max-tokens-limit", "64", "--max-prompt-tokens", "16"});
  const int port = server.port();
  auto post = [&](const std::string& body) {
    return http_request(port, "POST", "/v1/completions", body);
  };
  const json bad_json = error_of(post("{\"prompt\": "), 400);
  EXPECT_EQ(bad_json["type"], "invalid_request_error");
  EXPECT_NE(bad_json["message"].get<std::string>().find("JSON"), std::string::npos);

  const std::vector<std::pair<json, std::string>> cases = {
      {{{"prompt", "x"}, {"max_tokenz", 3}}, "max_tokenz"},
      {{{"prompt", "x"}, {"max_tokens", 65}}, "max_tokens"},
      {{{"prompt", "x"}, {"max_tokens", 0}}, "max_tokens"},
      {{{"prompt", std::string(200, 'a') + " b c d e f g h i j k l m n o p q"}}, "prompt"},
      {{{"prompt", "x"}, {"temperature", -1}}, "temperature"},
      {{{"prompt", "x"}, {"top_p", 0}}, "top_p"},
      {{{"prompt", "x"}, {"compressor", "nope"}}, "compressor"},
      {{{"prompt", "x"}, {"mode", "fast"}}, "mode"},
      {{{"prompt", "x"}, {"n", 2}}, "n"},
      {{{"prompt", "x"}, {"logprobs", 6}}, "logprobs"},
      {{{"prompt", {"a", "b"}}}, "prompt"},
      {{{"max_tokens", 3}}, "prompt"},
      {{{"prompt", "x"}, {"stream_options", {{"include_usage", true}}}}, "stream_options"},
  };
  for (const auto& [body, param] : cases) {
    SCOPED_TRACE(body.dump());
    const json e = error_of(post(body.dump()), 400);
    EXPECT_EQ(e["param"], param) << e["message"];
    EXPECT_EQ(e["type"], "invalid_request_error");
  }
  // The message names the field as the client sent it, and an integer as one.
  const json ids = error_of(post(json{{"prompt", {-1}}}.dump()), 400);
  EXPECT_EQ(ids["param"], "prompt");
  EXPECT_NE(ids["message"].get<std::string>().find("'prompt'"), std::string::npos) << ids["message"];
  EXPECT_EQ(ids["message"].get<std::string>().find("prompt_ids"), std::string::npos) << ids["message"];
  const json n = error_of(post(json{{"prompt", "x"}, {"n", 2}}.dump()), 400);
  EXPECT_NE(n["message"].get<std::string>().find("only 1 (or absent)"), std::string::npos) << n["message"];
}

TEST(serve_errors, unknown_model_and_route_get_404_and_wrong_method_405) {
  ServerProcess server;
  const json e = error_of(http_request(server.port(), "POST", "/v1/completions",
                                       json{{"model", "gpt-4"}, {"prompt", "x"}}.dump()),
                          404);
  EXPECT_EQ(e["code"], "model_not_found");
  EXPECT_EQ(e["param"], "model");
  (void)error_of(http_request(server.port(), "GET", "/v2/things"), 404);
  const HttpResponse wrong = http_request(server.port(), "GET", "/v1/completions");
  (void)error_of(wrong, 405);
  ASSERT_TRUE(wrong.headers.count("allow")) << "a 405 names the methods the path takes";
  EXPECT_EQ(wrong.headers.at("allow"), "POST");
  const HttpResponse put = http_request(server.port(), "PUT", "/health");
  (void)error_of(put, 405);
  EXPECT_EQ(put.headers.count("allow") ? put.headers.at("allow") : "", "GET");
}

TEST(serve_errors, a_body_of_unknown_length_or_a_malformed_chunk_gets_400_then_the_close) {
  ServerProcess server;
  const std::string body = json{{"prompt", "x"}, {"max_tokens", 2}}.dump();
  {  // gzip with no chunked last: the body's end is unknown, its bytes no next request
    HttpConnection c(server.port());
    c.set_read_timeout(10);
    c.send_raw("POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
               "Transfer-Encoding: gzip\r\n\r\n" + body);
    const HttpResponse r = c.read();
    EXPECT_EQ(r.status, 400) << r.body;
    EXPECT_NE(r.body.find("Transfer-Encoding 'gzip'"), std::string::npos) << r.body;
    EXPECT_EQ(c.read().status, 0) << "one answer, then the close";
  }
  {  // a chunk size that is not hex
    HttpConnection c(server.port());
    c.set_read_timeout(10);
    c.send_raw("POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
               "Transfer-Encoding: chunked\r\n\r\nzz\r\n" + body + "\r\n0\r\n\r\n");
    const HttpResponse r = c.read();
    EXPECT_EQ(r.status, 400) << r.body;
    EXPECT_NE(r.body.find("malformed HTTP body"), std::string::npos) << r.body;
  }
  // The server still answers.
  EXPECT_EQ(http_request(server.port(), "POST", "/v1/completions", body).status, 200);
}

TEST(serve_errors, a_body_over_the_limit_gets_413) {
  ServerProcess server({"--max-body", "1K"});
  const json b = {{"prompt", std::string(2000, 'a')}};
  const json e = error_of(http_request(server.port(), "POST", "/v1/completions", b.dump()), 413);
  EXPECT_NE(e["message"].get<std::string>().find("1024"), std::string::npos) << e["message"];
}

TEST(serve_errors, an_api_key_guards_the_v1_routes_but_not_health) {
  ServerProcess server({"--api-key", "sekret"});
  const json e = error_of(http_request(server.port(), "GET", "/v1/models"), 401);
  EXPECT_EQ(e["code"], "invalid_api_key");
  (void)error_of(http_request(server.port(), "GET", "/v1/models", "", {"Authorization: Bearer nope"}),
                 401);
  EXPECT_EQ(http_request(server.port(), "GET", "/v1/models", "", {"Authorization: Bearer sekret"})
                .status,
            200);
  // The scheme's name is case-insensitive (RFC 9110); the key is not.
  EXPECT_EQ(http_request(server.port(), "GET", "/v1/models", "", {"Authorization: bearer  sekret"})
                .status,
            200);
  (void)error_of(http_request(server.port(), "GET", "/v1/models", "", {"Authorization: Bearer SEKRET"}),
                 401);
  (void)error_of(http_request(server.port(), "GET", "/v1/models", "", {"Authorization: Basic sekret"}),
                 401);
  (void)error_of(http_request(server.port(), "GET", "/v1/models", "", {"Authorization: Bearer"}), 401);
  EXPECT_EQ(http_request(server.port(), "POST", "/v1/completions",
                         json{{"prompt", "x"}, {"max_tokens", 2}}.dump(),
                         {"Authorization: Bearer sekret"})
                .status,
            200);
  EXPECT_EQ(http_request(server.port(), "GET", "/health").status, 200);
  // Two Authorization headers: which one counts is not guessed.
  const json twice = error_of(http_request(server.port(), "GET", "/v1/models", "",
                                           {"Authorization: Bearer sekret", "Authorization: Bearer nope"}),
                              400);
  EXPECT_NE(twice["message"].get<std::string>().find("more than one Authorization header"), std::string::npos)
      << twice;
}

TEST(serve_errors, a_body_cut_short_by_the_end_of_the_stream_gets_400) {
  ServerProcess server;
  // A POST's headers and the start of its body, then the client's end of stream.
  const auto cut_short = [&](const std::string& framing_and_body) {
    HttpConnection c(server.port());
    c.set_read_timeout(10);
    c.send_raw("POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" +
               framing_and_body);
    c.shutdown_write();
    return c.read();
  };
  const HttpResponse r = cut_short("Content-Length: 100\r\n\r\n{\"prompt\": \"x\"}");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("ended before its Content-Length (100 bytes)"), std::string::npos) << r.body;
  const HttpResponse rc = cut_short("Transfer-Encoding: chunked\r\n\r\n5\r\n{\"pro");
  EXPECT_EQ(rc.status, 400) << rc.body;
  EXPECT_NE(rc.body.find("ended before its last chunk"), std::string::npos) << rc.body;
  EXPECT_EQ(http_request(server.port(), "GET", "/health").status, 200) << "the server still answers";
}

TEST(serve_errors, a_request_line_over_the_header_limit_gets_414_and_long_headers_get_431) {
  ServerProcess server;
  {
    HttpConnection c(server.port());
    c.set_read_timeout(10);
    c.send_raw("GET /health?" + std::string(20000, 'a') + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    const HttpResponse r = c.read();
    EXPECT_EQ(r.status, 414) << r.body;
    EXPECT_NE(r.body.find("request line is longer than"), std::string::npos) << r.body;
  }
  {
    HttpConnection c(server.port());
    c.set_read_timeout(10);
    c.send_raw("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + std::string(40000, 'b') + "\r\n\r\n");
    const HttpResponse r = c.read();
    EXPECT_EQ(r.status, 431) << r.body;
  }
  {  // the same, the request line arriving in two pieces (the parser waits for the headers' end)
    HttpConnection c(server.port());
    c.set_read_timeout(10);
    c.send_raw("GET /hea");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    c.send_raw("lth HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + std::string(20000, 'b') + "\r\n\r\n");
    const HttpResponse r = c.read();
    EXPECT_EQ(r.status, 431) << r.body;
  }
  EXPECT_EQ(http_request(server.port(), "GET", "/health").status, 200);
}

TEST(serve_errors, a_non_loopback_address_without_an_api_key_is_refused_at_start) {
  const CliRun r = run_vericache("serve --host 0.0.0.0 --port 0", true);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("error: --host 0.0.0.0: binding a non-loopback address needs --api-key"),
            std::string::npos)
      << r.out;
}

TEST(serve_errors, a_full_queue_gets_429) {
  ServerProcess server({"--max-concurrency", "1", "--max-queue", "1"});
  const json longer = {{"prompt", "<|begin_of_text|>x"}, {"max_tokens", 30000},
                       {"ignore_eos", true}, {"mode", "full"}};
  HttpConnection a(server.port()), b(server.port());
  a.send("POST", "/v1/completions", longer.dump());
  b.send("POST", "/v1/completions", longer.dump());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const HttpResponse busy = http_request(server.port(), "POST", "/v1/completions",
                                        json{{"prompt", "x"}, {"max_tokens", 2}}.dump());
  const json e = error_of(busy, 429);
  EXPECT_EQ(e["code"], "rate_limit_exceeded");
  EXPECT_EQ(busy.headers.count("retry-after") ? busy.headers.at("retry-after") : "", "1");
  const std::string message = e["message"];
  ASSERT_NE(message.find("retry later"), std::string::npos) << message;
  EXPECT_EQ(message.find("retry later"), message.rfind("retry later")) << "said once: " << message;
  // Leaving cancels both; the server is free again.
  a.close();
  b.close();
  HttpResponse ok;
  for (int i = 0; i < 100 && ok.status != 200; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ok = http_request(server.port(), "POST", "/v1/completions",
                      json{{"prompt", "x"}, {"max_tokens", 2}}.dump());
  }
  EXPECT_EQ(ok.status, 200) << ok.body;
}

}  // namespace
}  // namespace vc::test
