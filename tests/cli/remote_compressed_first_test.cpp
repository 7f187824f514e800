// The compressed-first remote flow through the CLI against a real redis-server:
// a warm request drafts from the prefix's compressed chunks while its full chunks
// stream in, and its tokens and logprobs equal full decoding bit for bit (greedy
// and seeded, SnapKV and KIVI); a fault in the full chunks alone (corrupt, missing)
// is recomputed locally before any token, a fault in the compressed chunks alone
// falls back to the full flow; lossy mode decodes over the fetched view; a longer
// prompt publishes the compressed chunks past the ones it fetched.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "kvtiers/remote/redis_client.hpp"
#include "tests/cli/cli_support.hpp"
#include "tests/cli/prompt_file.hpp"
#include "tests/cli/generate_json.hpp"
#include "tests/kvtiers/redis_server.hpp"
#include "tools/vericache/throttled_proxy.hpp"

namespace {

using nlohmann::json;

std::string code_prompt() {  // a few hundred tokens of code
  std::string p = "<|begin_of_text|>";
  for (int i = 0; i < 12; ++i)
    p += "def g" + std::to_string(i) + "(y):\n    return y - " + std::to_string(i) + " * " +
         std::to_string(i + 2) + "\n\n";
  return p + "def main():\n    total = 0\n    for i in range(10):";
}

// code_prompt() and a few more functions: several 32-token chunks past its own.
std::string longer_prompt() {
  std::string p = code_prompt() + "\n        total += i\n    return total\n\n";
  for (int i = 0; i < 8; ++i)
    p += "def h" + std::to_string(i) + "(z):\n    return z * " + std::to_string(i + 3) + "\n\n";
  return p + "def last():";
}

using vc::test::expect_same_tokens;

// Blocks of 16 positions (the default is 64): the prompt of a few hundred tokens then
// spans many 32-token remote chunks (a chunk is whole blocks).
constexpr const char* kSmallBlocks = " --block-tokens 16";
json generate(const std::string& args) { return vc::test::generate_json(args + kSmallBlocks); }

// Applies `f` to every key of the store matching `pattern`.
template <class F>
void each_key(const std::string& url, const std::string& pattern, F&& f) {
  vc::RedisClient c(vc::parse_redis_url(url));
  const auto scan = c.command({"SCAN", "0", "MATCH", pattern, "COUNT", "10000"});
  for (const auto& k : scan.elements[1].elements) f(c, k.str);
}

void corrupt(const std::string& url, const std::string& pattern) {
  each_key(url, pattern, [](vc::RedisClient& c, const std::string& k) {
    std::string v = c.command({"GET", k}).str;
    v[v.size() - 7] ^= 0x20;
    ASSERT_EQ(c.command({"SET", k, v}).str, "OK");
  });
}

TEST(remote_compressed_first, drafting_from_compressed_chunks_gives_the_tokens_of_full_decoding) {
  vc::test::RedisServer server;
  VC_REQUIRE_REDIS(server);
  vc::test::PromptFile prompt(code_prompt());
  const std::string remote = " --remote " + server.url() + " --remote-chunk 32";
  // The same store behind a link of 200 KB/s: the full chunks (0.6 MB) take seconds,
  // the drafter drafts while they arrive.
  vc::cli::ThrottledProxy slow("127.0.0.1", server.port(), 200e3);
  const std::string slow_remote = " --remote " + slow.url() + " --remote-chunk 32 --remote-timeout-ms 60000";
  size_t most_rounds_ahead = 0;  // verification rounds fed by the drafts made ahead
  for (const std::string sampling : {"", " --temperature 0.7 --top-k 40 --seed 5"}) {
    const std::string base = "--prompt-file " + prompt.path +
                             " --max-tokens 24 --json --logprobs --ignore-eos" + sampling;
    const json full = generate(base);
    for (const std::string mode : {" --mode vericache --compressor snapkv --ratio 4 --draft 8",
                                   " --mode vericache --compressor kivi --compressor-param group_size=32 --ratio 4 "
                                   "--draft 8"}) {
      ASSERT_EQ(vc::test::run_vericache("cache clear --remote " + server.url(), false).code, 0);
      const json cold = generate(base + mode + remote);
      expect_same_tokens(full, cold, "cold" + mode);
      EXPECT_FALSE(cold["stats"]["remote"]["compressed_first"].get<bool>());
      EXPECT_GT(cold["stats"]["remote"]["compressed_chunks_published"].get<int>(), 3) << cold["stats"]["remote"];
      const json warm = generate(base + mode + remote);
      expect_same_tokens(full, warm, "warm" + mode);
      const json& rs = warm["stats"]["remote"];
      EXPECT_TRUE(rs["compressed_first"].get<bool>()) << rs;
      EXPECT_GT(rs["compressed_chunks_hit"].get<int>(), 3) << rs;
      EXPECT_GT(rs["bytes_fetched_compressed"].get<double>(), 0) << rs;
      EXPECT_GT(rs["chunks_hit"].get<int>(), 3) << rs;  // the full chunks, from the fetch thread
      // Through the slow link: drafts made while the full chunks arrived, verified.
      const json slow_warm = generate(base + mode + slow_remote);
      expect_same_tokens(full, slow_warm, "slow link" + mode);
      const json& ss = slow_warm["stats"]["remote"];
      EXPECT_TRUE(ss["compressed_first"].get<bool>()) << ss;
      EXPECT_GT(ss["predrafted"].get<int>(), 0) << ss;
      EXPECT_GT(ss["full_wait_seconds"].get<double>(), 0.1) << ss;
      // 3 s of full chunks: the drafter drafts every token requested ahead, not one round.
      EXPECT_GT(ss["predrafted"].get<int>(), 9) << ss;
      most_rounds_ahead = std::max(most_rounds_ahead, ss["predraft_rounds"].get<size_t>());
      // One round ahead only (the flow before --remote-predraft): the same tokens.
      const json one_round = generate(base + mode + slow_remote + " --remote-predraft 0");
      expect_same_tokens(full, one_round, "one round ahead" + mode);
      EXPECT_LE(one_round["stats"]["remote"]["predrafted"].get<int>(), 8) << one_round["stats"]["remote"];
      EXPECT_LE(one_round["stats"]["remote"]["predraft_rounds"].get<int>(), 1) << one_round["stats"]["remote"];
      // The full flow over the same store: the same tokens.
      const json full_flow = generate(base + mode + remote + " --remote-flow full");
      expect_same_tokens(full, full_flow, "full flow" + mode);
      EXPECT_FALSE(full_flow["stats"]["remote"]["compressed_first"].get<bool>());
      EXPECT_EQ(full_flow["stats"]["remote"]["compressed_chunks_hit"].get<int>(), 0);
    }
  }
  EXPECT_GE(most_rounds_ahead, 2u) << "no run verified two rounds of drafts made ahead";
}

TEST(remote_compressed_first, drafting_ahead_stops_at_the_fold_interval_and_one_round) {
  // The tail's fast-memory bound holds --fold-every positions and a round: over a
  // link slow enough for any number of drafts, generate drafts exactly that many
  // after its guess of the first token (here 4 + 3), and the tokens stay exact.
  vc::test::RedisServer server;
  VC_REQUIRE_REDIS(server);
  vc::test::PromptFile prompt(code_prompt());
  const std::string common = "--prompt-file " + prompt.path + " --max-tokens 24 --json --logprobs --ignore-eos";
  const std::string base = common + " --mode vericache --compressor snapkv --ratio 4 --draft 3 --fold-every 4";
  (void)generate(base + " --remote " + server.url() + " --remote-chunk 32");  // publishes both forms
  vc::cli::ThrottledProxy slow("127.0.0.1", server.port(), 200e3);
  const json full = generate(common);
  const json j = generate(base + " --remote " + slow.url() + " --remote-chunk 32 --remote-timeout-ms 60000");
  expect_same_tokens(full, j, "fold interval 4, draft 3");
  const json& rs = j["stats"]["remote"];
  ASSERT_TRUE(rs["compressed_first"].get<bool>()) << rs;
  EXPECT_GT(rs["full_wait_seconds"].get<double>(), 0.1) << rs;
  EXPECT_EQ(rs["predrafted"].get<int>(), 4 + 3) << rs;
  // The default interval (64): it drafts further, up to max tokens.
  const json free_run = generate(common + " --mode vericache --compressor snapkv --ratio 4 --draft 3 --remote " +
                                 slow.url() + " --remote-chunk 32 --remote-timeout-ms 60000");
  expect_same_tokens(full, free_run, "fold interval 64");
  EXPECT_GT(free_run["stats"]["remote"]["predrafted"].get<int>(), 4 + 3) << free_run["stats"]["remote"];
}

TEST(remote_compressed_first, the_suffix_in_the_tail_does_not_count_toward_a_fold) {
  // The fetched view ends at a chunk boundary and the prompt's suffix sits in the
  // drafter's tail: folds count from the prompt's end, so with --fold-every 8 and 6
  // tokens none comes (the suffix alone is longer than 8), and with 24 tokens folds
  // still run. Tokens equal full decoding either way.
  vc::test::RedisServer server;
  VC_REQUIRE_REDIS(server);
  vc::test::PromptFile prompt(code_prompt());
  const std::string remote = " --remote " + server.url() + " --remote-chunk 32";
  const std::string common = "--prompt-file " + prompt.path + " --json --logprobs --ignore-eos";
  const std::string mode = " --mode vericache --compressor snapkv --ratio 4 --draft 3 --fold-every 8";
  (void)generate(common + " --max-tokens 6" + mode + remote);  // publishes both forms
  const json full6 = generate(common + " --max-tokens 6");
  const json short_run = generate(common + " --max-tokens 6" + mode + remote);
  expect_same_tokens(full6, short_run, "6 tokens");
  ASSERT_TRUE(short_run["stats"]["remote"]["compressed_first"].get<bool>()) << short_run["stats"]["remote"];
  const size_t n = short_run["stats"]["prompt_tokens"].get<size_t>();
  const size_t suffix = n - short_run["stats"]["remote"]["compressed_positions_hit"].get<size_t>();
  ASSERT_GE(suffix, 8u) << "the prompt's suffix after its last whole chunk is too short for this test";
  EXPECT_EQ(short_run["stats"]["vericache"]["view_rebuilds"], 0) << short_run["stats"];
  const json full24 = generate(common + " --max-tokens 24");
  const json long_run = generate(common + " --max-tokens 24" + mode + remote);
  expect_same_tokens(full24, long_run, "24 tokens");
  EXPECT_GT(long_run["stats"]["vericache"]["view_rebuilds"].get<int>(), 0) << long_run["stats"];
}

TEST(remote_compressed_first, a_longer_prompt_drafts_from_the_cached_chunks_and_publishes_the_compressed_ones_it_lacked) {
  // The store holds a prompt's chunks; a longer prompt starting with it fetches
  // those compressed chunks first, and its complete chunks past them are compressed
  // here (the view rebuilt over the whole prompt once the exact prefill is in) and
  // published: the same longer prompt next time hits every one of them. Tokens
  // equal full decoding each time.
  vc::test::RedisServer server;
  VC_REQUIRE_REDIS(server);
  const std::string longer = longer_prompt();
  vc::test::PromptFile shorter_file(code_prompt()), longer_file(longer);
  const std::string remote = " --remote " + server.url() + " --remote-chunk 32";
  const std::string tail = " --max-tokens 12 --json --logprobs --ignore-eos";
  const std::string mode = " --mode vericache --compressor snapkv --ratio 4 --draft 6";
  (void)generate("--prompt-file " + shorter_file.path + tail + mode + remote);  // publishes its chunks
  const json full = generate("--prompt-file " + longer_file.path + tail);
  const json first = generate("--prompt-file " + longer_file.path + tail + mode + remote);
  expect_same_tokens(full, first, "the first longer run");
  const json& r1 = first["stats"]["remote"];
  ASSERT_TRUE(r1["compressed_first"].get<bool>()) << r1;
  const size_t hit = r1["compressed_chunks_hit"].get<size_t>();
  const size_t published = r1["compressed_chunks_published"].get<size_t>();
  EXPECT_GE(hit, 3u) << r1;
  EXPECT_GE(published, 4u) << "the longer prompt's chunks past the shorter one's: " << r1;
  const json second = generate("--prompt-file " + longer_file.path + tail + mode + remote);
  expect_same_tokens(full, second, "the second longer run");
  const json& r2 = second["stats"]["remote"];
  ASSERT_TRUE(r2["compressed_first"].get<bool>()) << r2;
  EXPECT_EQ(hit + published, r2["compressed_chunks_hit"].get<size_t>()) << r2;
  EXPECT_EQ(0u, r2["compressed_chunks_published"].get<size_t>()) << "it fetched them all: " << r2;
}

TEST(remote_compressed_first, a_longer_suffix_than_the_budget_holds_takes_the_full_flow_naming_why) {
  // A prompt extending a cached one leaves a suffix of many chunks past the fetched
  // view. Just below the smallest --fast-memory at which generate drafts over it
  // (found by bisection), it must take the full flow and say why, not fail on the
  // drafter's tail.
  vc::test::RedisServer server;
  VC_REQUIRE_REDIS(server);
  const std::string longer = longer_prompt();
  vc::test::PromptFile shorter_file(code_prompt()), longer_file(longer);
  const std::string remote = " --remote " + server.url() + " --remote-chunk 32";
  const std::string mode = " --mode vericache --compressor snapkv --ratio 4 --draft 3";
  const std::string tail = " --max-tokens 6 --json --logprobs --ignore-eos";
  // Each probe starts from a store holding the shorter prompt's chunks alone (a run
  // that drafts over the suffix publishes the chunks past them).
  auto store_the_shorter = [&] {
    ASSERT_EQ(vc::test::run_vericache("cache clear --remote " + server.url(), false).code, 0);
    (void)generate("--prompt-file " + shorter_file.path + tail + mode + remote);
  };
  const std::string args = "generate --prompt-file " + longer_file.path + tail + mode + remote + kSmallBlocks;
  // The run at `budget` over a store holding every chunk of the shorter prompt (as
  // many compressed chunks hit as with no budget, `whole`): a store that missed some
  // (a chunk whose write-behind timed out on a loaded machine) leaves a longer suffix,
  // which a budget that fits the true suffix may not hold, so such a run is redone.
  // Any other outcome (a run that failed otherwise, or did not draft for another
  // reason) is redone too, and after three such runs fails the test, saying what
  // happened: a "no" the bisection takes is always the budget's.
  size_t whole = 0;  // compressed chunks a complete store gives; 0: not known yet
  auto probe = [&](size_t budget) {
    std::string why;
    for (int attempt = 0; attempt < 3; ++attempt) {
      store_the_shorter();
      const auto r = vc::test::run_vericache(args + " --fast-memory " + std::to_string(budget), false);
      if (r.code != 0) {
        // Refused: the request's bound alone exceeds the budget (said on stderr; a
        // refusal comes before any work, so asking again costs nothing).
        const auto said = vc::test::run_vericache(args + " --fast-memory " + std::to_string(budget), true);
        if (said.out.find("more than the budget") != std::string::npos) return std::optional<json>{};
        why = "exit " + std::to_string(r.code) + ": " + said.out;
        continue;
      }
      json j = json::parse(r.out);
      const json& rs = j["stats"]["remote"];
      const size_t hit = rs["compressed_chunks_hit"].get<size_t>();
      const std::string reason = rs["compressed_stop_reason"].get<std::string>();
      const bool drafted = rs["compressed_first"].get<bool>();
      const bool complete = whole == 0 || hit >= whole;
      // Not drafting is the budget's when it was never tried (no room for a chunk
      // of suffix) or the suffix past a complete view did not fit.
      const bool budget_no = !drafted && (reason.empty() || (complete && reason.find("fast-memory budget") !=
                                                                             std::string::npos));
      if ((drafted && complete) || budget_no) return std::optional<json>(std::move(j));
      why = "hit " + std::to_string(hit) + " of " + std::to_string(whole) + " compressed chunks, " +
            (drafted ? "drafted" : "did not draft") + "; " + reason;
    }
    ADD_FAILURE() << "at --fast-memory " << budget << " three runs were neither a plain yes nor the budget's no: "
                  << why;
    return std::optional<json>{};
  };
  // Drafting over the suffix, or not for the budget (or never tried: an empty reason).
  auto drafts_over_it = [&](size_t budget) {
    const std::optional<json> j = probe(budget);
    return j && (*j)["stats"]["remote"]["compressed_first"].get<bool>();
  };
  size_t lo = 1, hi = size_t(1) << 32;  // lo does not draft over the suffix, hi does
  {
    const std::optional<json> free_run = probe(hi);
    ASSERT_TRUE(free_run && (*free_run)["stats"]["remote"]["compressed_first"].get<bool>());
    whole = (*free_run)["stats"]["remote"]["compressed_chunks_hit"].get<size_t>();
    ASSERT_GT(whole, 0u);
  }
  while (hi - lo > 1) {
    const size_t mid = lo + (hi - lo) / 2;
    (drafts_over_it(mid) ? hi : lo) = mid;
  }
  const std::optional<json> below = probe(lo);
  ASSERT_TRUE(below.has_value()) << "one byte short of room for the suffix, the request was refused";
  const json& j = *below;
  expect_same_tokens(generate("--prompt-file " + longer_file.path + tail), j, "the full flow");
  const json& rs = j["stats"]["remote"];
  EXPECT_FALSE(rs["compressed_first"].get<bool>()) << rs;
  EXPECT_NE(rs["compressed_stop_reason"].get<std::string>().find("does not fit the fast-memory budget: full flow"),
            std::string::npos)
      << rs;
}

TEST(remote_compressed_first, a_budget_without_room_for_the_suffix_takes_the_full_flow) {
  // Compressed first leaves up to a chunk of suffix in the drafter's tail, beside the
  // request's bound. At the smallest --fast-memory that admits the request (found by
  // bisection on generate's "needs ... more than the budget" error) there is no room
  // for it: generate takes the full flow, and its tokens stay exact.
  vc::test::RedisServer server;
  VC_REQUIRE_REDIS(server);
  vc::test::PromptFile prompt(code_prompt());
  const std::string common = "--prompt-file " + prompt.path + " --max-tokens 6 --json --logprobs --ignore-eos";
  const std::string args = common + " --mode vericache --compressor snapkv --ratio 4 --draft 3 --remote " +
                           server.url() + " --remote-chunk 32";
  (void)generate(args);  // publishes both forms
  const json unlimited = generate(args);
  ASSERT_TRUE(unlimited["stats"]["remote"]["compressed_first"].get<bool>()) << unlimited["stats"]["remote"];
  size_t lo = 1, hi = size_t(1) << 32;  // lo is refused, hi admitted
  ASSERT_EQ(vc::test::run_vericache("generate " + args + kSmallBlocks + " --fast-memory " + std::to_string(hi), false).code, 0);
  while (hi - lo > 1) {
    const size_t mid = lo + (hi - lo) / 2;
    const auto r = vc::test::run_vericache("generate " + args + kSmallBlocks + " --fast-memory " + std::to_string(mid), true);
    if (r.code == 0) {
      hi = mid;
    } else {
      ASSERT_NE(r.out.find("more than the budget"), std::string::npos) << r.out;
      lo = mid;
    }
  }
  const json tight = generate(args + " --fast-memory " + std::to_string(hi));
  expect_same_tokens(generate(common), tight, "the smallest budget");
  EXPECT_FALSE(tight["stats"]["remote"]["compressed_first"].get<bool>()) << tight["stats"]["remote"];
  EXPECT_GT(tight["stats"]["remote"]["chunks_hit"].get<int>(), 0) << "the full flow, from the store";
}

TEST(remote_compressed_first, a_fault_in_the_full_chunks_is_recomputed_before_any_token) {
  vc::test::RedisServer server;
  VC_REQUIRE_REDIS(server);
  vc::test::PromptFile prompt(code_prompt());
  const std::string common = "--prompt-file " + prompt.path + " --max-tokens 24 --json --logprobs --ignore-eos";
  const std::string base = common + " --mode vericache --compressor snapkv --ratio 4 --draft 8";
  const std::string remote = " --remote " + server.url() + " --remote-chunk 32";
  const json full = generate(common);
  (void)generate(base + remote);  // publishes both forms

  // Every full chunk corrupt: drafting still starts from the compressed chunks,
  // the whole prompt is recomputed locally.
  corrupt(server.url(), "vc:kv:full:*");
  json j = generate(base + remote);
  expect_same_tokens(full, j, "full chunks corrupt");
  EXPECT_TRUE(j["stats"]["remote"]["compressed_first"].get<bool>());
  EXPECT_EQ(j["stats"]["remote"]["chunks_hit"], 0);
  EXPECT_NE(j["stats"]["remote"]["stop_reason"].get<std::string>().find("checksum"), std::string::npos)
      << j["stats"]["remote"];

  // That request republished the full chunks; now one in the middle is missing.
  int deleted = 0;
  vc::RedisClient c(vc::parse_redis_url(server.url()));
  const auto scan = c.command({"SCAN", "0", "MATCH", "vc:kv:full:*", "COUNT", "10000"});
  ASSERT_GT(scan.elements[1].elements.size(), 3u);
  j = generate(base + remote);
  const int all = j["stats"]["remote"]["chunks_hit"].get<int>();
  EXPECT_GT(all, 3);
  // Delete chunks until the full prefix is shorter than the compressed one.
  for (const auto& k : scan.elements[1].elements) {
    deleted += int(c.command({"DEL", k.str}).integer);
    j = generate(base + remote);
    if (j["stats"]["remote"]["chunks_hit"].get<int>() < all) break;
  }
  expect_same_tokens(full, j, "a full chunk missing");
  EXPECT_TRUE(j["stats"]["remote"]["compressed_first"].get<bool>());
  EXPECT_LT(j["stats"]["remote"]["chunks_hit"].get<int>(), all);
  EXPECT_NE(j["stats"]["remote"]["stop_reason"].get<std::string>().find("not in the store"), std::string::npos);
  EXPECT_GT(deleted, 0);

  // Compressed chunks corrupt: the full flow, the same tokens.
  corrupt(server.url(), "vc:kv:cmp:*");
  j = generate(base + remote);
  expect_same_tokens(full, j, "compressed chunks corrupt");
  EXPECT_FALSE(j["stats"]["remote"]["compressed_first"].get<bool>());
  EXPECT_NE(j["stats"]["remote"]["compressed_stop_reason"].get<std::string>().find("checksum"), std::string::npos)
      << j["stats"]["remote"];
}

TEST(remote_compressed_first, lossy_mode_decodes_over_the_fetched_view) {
  vc::test::RedisServer server;
  VC_REQUIRE_REDIS(server);
  vc::test::PromptFile prompt(code_prompt());
  const std::string base = "--prompt-file " + prompt.path +
                           " --max-tokens 16 --json --ignore-eos --mode lossy --compressor snapkv --ratio 4";
  const std::string remote = " --remote " + server.url() + " --remote-chunk 32";
  const json local = generate(base);
  (void)generate(base + remote);
  const json warm = generate(base + remote);
  EXPECT_TRUE(warm["stats"]["remote"]["compressed_first"].get<bool>()) << warm["stats"]["remote"];
  EXPECT_EQ(warm["stats"]["remote"]["chunks_hit"], 0);  // lossy reads no full chunk
  EXPECT_EQ(warm["output_ids"].size(), local["output_ids"].size());
}

}  // namespace
