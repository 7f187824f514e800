// VeriCache's n-gram draft level per request in `vericache serve`: the extra body
// fields draft_hierarchy, ngram_min, ngram_max and ngram_proposal (defaults from
// serve's --draft-hierarchy and --ngram-* options) give the text `vericache generate`
// gives with the same options, and the level's figures in the "vericache" object;
// bad values get a 400 naming the field.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "tests/cli/generate_json.hpp"
#include "tests/server/server_support.hpp"

namespace vc::test {
namespace {

using nlohmann::json;

// Repeats itself, so the n-gram level finds something to propose.
const std::string kPrompt =
    "<|begin_of_text|>def add(a, b):\n    return a + b\n\ndef add(a, b):";

const std::string kGenerate = "--json --mode vericache --draft 4 --ignore-eos --max-tokens 32 "
                              "--prompt '" + kPrompt + "'";

json body(const json& extra) {
  json b = {{"prompt", kPrompt}, {"max_tokens", 32}, {"mode", "vericache"}, {"draft", 4},
            {"ignore_eos", true}};
  b.update(extra);
  return b;
}

json complete(const ServerProcess& server, const json& b) {
  const HttpResponse r = http_request(server.port(), "POST", "/v1/completions", b.dump());
  EXPECT_EQ(r.status, 200) << r.body;
  return r.status == 200 ? r.json() : json::object();
}

TEST(serve_draft_hierarchy, ngram_requests_give_generates_text_and_report_the_level) {
  ServerProcess server;
  const json ngram = generate_json(kGenerate + " --draft-hierarchy ngram --ngram-min 1 "
                                               "--ngram-max 3 --ngram-proposal 6");
  const json j = complete(server, body({{"draft_hierarchy", "ngram"}, {"ngram_min", 1},
                                        {"ngram_max", 3}, {"ngram_proposal", 6}}));
  EXPECT_EQ(j["choices"][0]["text"], ngram["text"]);
  const json& v = j["vericache"];
  EXPECT_EQ(v["draft_hierarchy"], "ngram");
  EXPECT_GT(v["ngram_proposed"].get<size_t>(), 0u) << v;
  EXPECT_LE(v["ngram_confirmed"].get<size_t>(), v["ngram_proposed"].get<size_t>());
  EXPECT_LE(v["ngram_accepted"].get<size_t>(), v["ngram_confirmed"].get<size_t>());
  EXPECT_GT(v["drafter_passes"].get<size_t>(), 0u);
  EXPECT_GT(v["ngram_seconds"].get<double>(), 0.0) << v;
  // Without the level: generate's text too, and no n-gram figures.
  const json none = complete(server, body(json::object()));
  EXPECT_EQ(none["choices"][0]["text"], generate_json(kGenerate)["text"]);
  EXPECT_EQ(none["vericache"]["draft_hierarchy"], "none");
  EXPECT_FALSE(none["vericache"].contains("ngram_proposed"));
}

TEST(serve_draft_hierarchy, serves_default_comes_from_its_options_and_a_request_may_turn_it_off) {
  ServerProcess server({"--draft-hierarchy", "ngram", "--ngram-proposal", "6"});
  const json j = complete(server, body(json::object()));
  EXPECT_EQ(j["vericache"]["draft_hierarchy"], "ngram");
  EXPECT_EQ(j["choices"][0]["text"],
            generate_json(kGenerate + " --draft-hierarchy ngram --ngram-proposal 6")["text"]);
  EXPECT_EQ(complete(server, body({{"draft_hierarchy", "none"}}))["vericache"]["draft_hierarchy"],
            "none");
}

TEST(serve_draft_hierarchy, bad_values_get_400_naming_the_field) {
  ServerProcess server;
  const std::pair<json, const char*> cases[] = {
      {{{"draft_hierarchy", "eagle"}}, "draft_hierarchy"},
      {{{"draft_hierarchy", 3}}, "draft_hierarchy"},
      {{{"ngram_min", 0}}, "ngram_min"},
      {{{"ngram_max", "4"}}, "ngram_max"},
      {{{"ngram_min", 3}, {"ngram_max", 2}}, "ngram_max"},
      {{{"ngram_proposal", 0}}, "ngram_proposal"},
  };
  for (const auto& [extra, field] : cases) {
    const HttpResponse r =
        http_request(server.port(), "POST", "/v1/completions", body(extra).dump());
    EXPECT_EQ(r.status, 400) << extra << " " << r.body;
    EXPECT_EQ(r.json()["error"]["param"], field) << r.body;
    EXPECT_NE(r.json()["error"]["message"].get<std::string>().find(field), std::string::npos)
        << r.body;
  }
}

}  // namespace
}  // namespace vc::test
