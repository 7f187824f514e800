// `vericache batch --remote ... --remote-recompute-front` against a real
// redis-server: in the engine, a net_fetcher fetches each request's cached chunks
// from the last one down while the drafter prefills its prefix from the first one
// up, until they meet. Whichever side takes a chunk, every vericache line's tokens
// and logprobs equal `batch` in full mode and a lossy line's equal `batch` without
// the store, the two sides cover the prefix the plain full flow fetches, the chunks
// the store lacked are published (those it held are not sent again), and a corrupt
// or dead store leaves the whole prefix to the drafter. A tensor-parallel group's
// ranks each meet their own fetch, at one chunk for all of them.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <algorithm>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/cli/cli_support.hpp"
#include "tests/cli/corrupt_chunks.hpp"
#include "tests/kvtiers/redis_server.hpp"

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

std::string code_prompt(int defs) {  // a few hundred tokens of code
  std::string p = "<|begin_of_text|>";
  for (int i = 0; i < defs; ++i)
    p += "def h" + std::to_string(i) + "(z):\n    return z + " + std::to_string(i) + " * " +
         std::to_string(i + 3) + "\n\n";
  return p + "class Deque:\n    def append(self, item):";
}

struct Dir {
  fs::path path = fs::temp_directory_path() / ("vc-batch-front-" + std::to_string(::getpid()));
  Dir() {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~Dir() { fs::remove_all(path); }
};

// Three vericache lines (greedy, sampled, KIVI) and a lossy one over `prompt`; with
// `full`, the vericache lines in full mode and no lossy line.
void write_lines(const Dir& d, const std::string& name, const std::string& prompt, bool full) {
  std::ofstream in(d.path / name);
  const auto mode = [&](const char* m) { return full ? "full" : m; };
  in << json{{"prompt", prompt}, {"max_tokens", 20}, {"mode", mode("vericache")}, {"compressor", "snapkv"},
             {"draft", 8}, {"logprobs", true}, {"ignore_eos", true}}.dump()
     << "\n"
     << json{{"prompt", prompt}, {"max_tokens", 20}, {"mode", mode("vericache")}, {"compressor", "h2o"},
             {"draft", 6}, {"temperature", 0.7}, {"top_k", 40}, {"seed", 5}, {"logprobs", true},
             {"ignore_eos", true}}.dump()
     << "\n"
     << json{{"prompt", prompt}, {"max_tokens", 12}, {"mode", mode("vericache")}, {"compressor", "kivi"},
             {"draft", 4}, {"logprobs", true}, {"ignore_eos", true}}.dump()
     << "\n";
  if (!full)
    in << json{{"prompt", prompt}, {"max_tokens", 12}, {"mode", "lossy"}, {"compressor", "snapkv"},
               {"logprobs", true}, {"ignore_eos", true}}.dump()
       << "\n";
}

std::vector<json> run_batch(const Dir& d, const std::string& input, const std::string& name,
                            const std::string& extra) {
  const fs::path out = d.path / (name + ".jsonl");
  const auto r = vc::test::run_vericache("batch --block-tokens 16 --input " + (d.path / input).string() +
                                             " --output " + out.string() + extra,
                                         true);
  EXPECT_EQ(r.code, 0) << r.out;
  std::ifstream in(out);
  std::vector<json> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(json::parse(l));
  return lines;
}

size_t covered(const json& line) {  // prefix positions fetched or recomputed in front
  const json& r = line["stats"]["remote"];
  return r["positions_hit"].get<size_t>() + r["front_recomputed"].get<size_t>();
}

// The first want.size() lines of `got` equal `want`'s.
void expect_same_outputs(const std::vector<json>& want, const std::vector<json>& got, const std::string& what) {
  ASSERT_GE(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(want[i]["output_ids"], got[i]["output_ids"]) << what << ", line " << i + 1;
    EXPECT_EQ(want[i]["output_logprobs"], got[i]["output_logprobs"]) << what << ", line " << i + 1;
  }
}

const std::string kFull = " --remote-chunk 32 --remote-flow full";

// The four lines in in.jsonl and their full-mode twins in full.jsonl, over a store
// that holds their chunks: the full-mode run, and a run of the plain full flow.
struct Published {
  std::string remote;
  std::vector<json> full, plain;
};

Published publish_lines(const vc::test::RedisServer& server, const Dir& d) {
  const std::string p = code_prompt(14);
  write_lines(d, "in.jsonl", p, false);
  write_lines(d, "full.jsonl", p, true);
  Published out;
  out.remote = " --remote " + server.url() + kFull;
  out.full = run_batch(d, "full.jsonl", "full", "");
  (void)run_batch(d, "in.jsonl", "cold", out.remote);  // publishes at its exit
  out.plain = run_batch(d, "in.jsonl", "plain", out.remote);
  return out;
}

TEST(cli_batch_recompute_front, the_fetched_back_and_the_drafters_front_give_full_decodings_tokens) {
  vc::test::RedisServer server;
  VC_REQUIRE_REDIS(server);
  Dir d;
  const auto [remote, full, plain] = publish_lines(server, d);
  const auto local = run_batch(d, "in.jsonl", "local", "");
  const auto met = run_batch(d, "in.jsonl", "met", remote + " --remote-recompute-front");
  // With the full tier on disk the fetched chunks go into the requests' files.
  const auto met_disk = run_batch(d, "in.jsonl", "met-disk",
                                  remote + " --remote-recompute-front --full-tier disk --disk-dir " +
                                      (d.path / "kv").string());
  ASSERT_EQ(met.size(), 4u);
  expect_same_outputs(full, plain, "full flow");
  expect_same_outputs(full, met, "recompute front");
  expect_same_outputs(local, met, "recompute front, the lossy line too");
  expect_same_outputs(full, met_disk, "recompute front, disk tier");
  expect_same_outputs(local, met_disk, "recompute front, disk tier, the lossy line too");
  for (size_t i = 0; i < met_disk.size(); ++i)
    EXPECT_EQ(covered(met_disk[i]), covered(met[i])) << "line " << i + 1 << ": " << met_disk[i]["stats"]["remote"];
  for (size_t i = 0; i < met.size(); ++i) {
    SCOPED_TRACE("line " + std::to_string(i + 1));
    const json& rs = met[i]["stats"]["remote"];
    EXPECT_GT(plain[i]["stats"]["remote"]["chunks_hit"].get<int>(), 3);
    EXPECT_EQ(covered(met[i]), plain[i]["stats"]["remote"]["positions_hit"].get<size_t>()) << rs;
    EXPECT_EQ(rs["positions_hit"].get<int>(), 32 * rs["chunks_hit"].get<int>()) << rs;
    EXPECT_EQ(rs["front_recomputed"].get<int>() % 32, 0) << rs;
    EXPECT_EQ(plain[i]["stats"]["remote"]["front_recomputed"], 0);
  }
}

TEST(cli_batch_recompute_front, when_idle_the_first_request_recomputes_its_front_and_all_give_full_decodings_tokens) {
  vc::test::RedisServer server;
  VC_REQUIRE_REDIS(server);
  Dir d;
  const auto [remote, full, plain] = publish_lines(server, d);
  const auto idle = run_batch(d, "in.jsonl", "idle", remote + " --remote-recompute-front-when-idle");
  ASSERT_EQ(idle.size(), 4u);
  expect_same_outputs(full, idle, "recompute front when idle");
  // The first line is admitted alone: its front is recomputed. The others take
  // one flow or the other as they find the engine; either covers the prefix the
  // store holds.
  EXPECT_TRUE(idle[0]["stats"]["remote"]["recompute_front"].get<bool>()) << idle[0]["stats"]["remote"];
  // The second is admitted at once beside it (concurrency 8, no memory limit).
  EXPECT_FALSE(idle[1]["stats"]["remote"]["recompute_front"].get<bool>()) << idle[1]["stats"]["remote"];
  for (size_t i = 0; i < idle.size(); ++i) {
    const json& rs = idle[i]["stats"]["remote"];
    EXPECT_EQ(covered(idle[i]), plain[i]["stats"]["remote"]["positions_hit"].get<size_t>())
        << "line " << i + 1 << ": " << rs;
    if (!rs["recompute_front"].get<bool>()) {
      EXPECT_EQ(rs["front_recomputed"], 0) << "line " << i + 1;
    }
  }
}

TEST(cli_batch_recompute_front, priced_the_first_request_recomputes_its_front_and_each_says_why) {
  vc::test::RedisServer server;
  VC_REQUIRE_REDIS(server);
  Dir d;
  const auto [remote, full, plain] = publish_lines(server, d);
  const auto priced = run_batch(d, "in.jsonl", "priced", remote + " --remote-recompute-front-priced");
  ASSERT_EQ(priced.size(), 4u);
  expect_same_outputs(full, priced, "recompute front priced");
  // The first line is admitted alone; the second beside it, before any fetch or
  // prefill of this engine has been measured: the plain flow.
  const json& first = priced[0]["stats"]["remote"];
  EXPECT_TRUE(first["recompute_front"].get<bool>()) << first;
  EXPECT_NE(first["front_price"].get<std::string>().find("alone"), std::string::npos) << first;
  const json& second = priced[1]["stats"]["remote"];
  EXPECT_FALSE(second["recompute_front"].get<bool>()) << second;
  EXPECT_NE(second["front_price"].get<std::string>().find("measured yet"), std::string::npos) << second;
  for (size_t i = 0; i < priced.size(); ++i) {
    const json& rs = priced[i]["stats"]["remote"];
    EXPECT_FALSE(rs["front_price"].get<std::string>().empty()) << "line " << i + 1 << ": " << rs;
    EXPECT_EQ(covered(priced[i]), plain[i]["stats"]["remote"]["positions_hit"].get<size_t>())
        << "line " << i + 1 << ": " << rs;
  }
}

TEST(cli_batch_recompute_front, chunks_the_store_lacked_are_published_whichever_side_computed_them) {
  vc::test::RedisServer server;
  VC_REQUIRE_REDIS(server);
  Dir d;
  const std::string p = code_prompt(14);
  write_lines(d, "short.jsonl", p.substr(0, p.size() / 3), false);
  write_lines(d, "in.jsonl", p, false);
  const std::string remote = " --remote " + server.url() + kFull;
  // The store holds the first third's chunks (the keys chain over the tokens).
  const auto held = run_batch(d, "short.jsonl", "short", remote);
  ASSERT_EQ(held.size(), 4u);
  // The store answers only after a pause: the drafter computes each whole prefix,
  // past the chunks the store holds, before the back's first reply.
  server.pause();
  std::thread resume([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(4000));
    server.resume();
  });
  const auto met = run_batch(d, "in.jsonl", "met", remote + " --remote-recompute-front --remote-timeout-ms 20000");
  resume.join();
  const auto again = run_batch(d, "in.jsonl", "again", remote);
  ASSERT_EQ(met.size(), 4u);
  size_t stored = 0;  // the store's chunks of the prompt before: its first lines' (shared keys)
  for (size_t i = 0; i < held.size(); ++i)
    stored = std::max(stored, held[i]["stats"]["remote"]["chunks_published"].get<size_t>());
  ASSERT_GE(stored, 2u);
  for (size_t i = 0; i < met.size(); ++i) {
    SCOPED_TRACE("line " + std::to_string(i + 1));
    const json& rs = met[i]["stats"]["remote"];
    EXPECT_EQ(rs["chunks_hit"], 0) << rs;
    EXPECT_GT(rs["front_recomputed"].get<size_t>(), 32 * stored) << rs;
    // Its fetch was not heard from: the chunks the store held were not sent again.
    const size_t complete = met[i]["stats"]["prompt_tokens"].get<size_t>() / 32;
    EXPECT_LE(rs["chunks_published"].get<size_t>(), complete - stored) << rs;
    // Every chunk of the prefix is in the store now, those past the held ones too:
    // the plain full flow fetches it all.
    EXPECT_EQ(again[i]["stats"]["remote"]["positions_hit"], rs["front_recomputed"])
        << rs << "\n" << again[i]["stats"]["remote"];
  }
}

TEST(cli_batch_recompute_front, a_corrupt_or_dead_store_leaves_the_whole_prefix_to_the_drafter) {
  vc::test::RedisServer server;
  VC_REQUIRE_REDIS(server);
  Dir d;
  const std::string p = code_prompt(14);
  write_lines(d, "in.jsonl", p, false);
  write_lines(d, "full.jsonl", p, true);
  const std::string remote = " --remote " + server.url() + kFull;
  const auto full = run_batch(d, "full.jsonl", "full", "");
  (void)run_batch(d, "in.jsonl", "cold", remote);
  const auto plain = run_batch(d, "in.jsonl", "plain", remote);
  ASSERT_EQ(plain.size(), 4u);
  ASSERT_GT(plain[0]["stats"]["remote"]["positions_hit"].get<size_t>(), 96u);

  vc::test::corrupt_every_chunk(server.url());  // every payload flipped
  const auto corrupt = run_batch(d, "in.jsonl", "corrupt", remote + " --remote-recompute-front");
  expect_same_outputs(full, corrupt, "corrupt");
  server.kill();
  const auto down = run_batch(d, "in.jsonl", "down", remote + " --remote-recompute-front --remote-timeout-ms 300");
  expect_same_outputs(full, down, "store down");
  for (const auto* run : {&corrupt, &down})
    for (size_t i = 0; i < run->size(); ++i) {
      const json& rs = (*run)[i]["stats"]["remote"];
      EXPECT_EQ(rs["chunks_hit"], 0) << rs;
      EXPECT_EQ(rs["front_recomputed"], plain[i]["stats"]["remote"]["positions_hit"]) << rs;
    }
}

TEST(cli_batch_recompute_front, a_tensor_parallel_group_meets_each_ranks_fetch_at_one_chunk) {
  vc::test::RedisServer server;
  VC_REQUIRE_REDIS(server);
  Dir d;
  const std::string p = code_prompt(14);
  write_lines(d, "in.jsonl", p, false);
  write_lines(d, "full.jsonl", p, true);
  const std::string remote = " --remote " + server.url() + kFull + " --tp 2";
  const auto full = run_batch(d, "full.jsonl", "full", " --tp 2");  // the group's own numerics
  const auto local = run_batch(d, "in.jsonl", "local", " --tp 2");
  (void)run_batch(d, "in.jsonl", "cold", remote);
  const auto plain = run_batch(d, "in.jsonl", "plain", remote);
  const auto met = run_batch(d, "in.jsonl", "met", remote + " --remote-recompute-front");
  ASSERT_EQ(plain.size(), 4u);
  ASSERT_GT(plain[0]["stats"]["remote"]["chunks_hit"].get<int>(), 3) << "every rank's chunks are in the store";
  expect_same_outputs(full, met, "tp 2");
  expect_same_outputs(local, met, "tp 2, the lossy line too");
  for (size_t i = 0; i < met.size(); ++i) {
    SCOPED_TRACE("line " + std::to_string(i + 1));
    const json& rs = met[i]["stats"]["remote"];
    EXPECT_EQ(covered(met[i]), plain[i]["stats"]["remote"]["positions_hit"].get<size_t>()) << rs;
    EXPECT_EQ(rs["front_recomputed"].get<int>() % 32, 0) << rs;
  }
  // With the store down every rank's front computes the whole prefix.
  server.kill();
  const auto down = run_batch(d, "in.jsonl", "down", remote + " --remote-recompute-front --remote-timeout-ms 300");
  expect_same_outputs(full, down, "tp 2, store down");
  for (size_t i = 0; i < down.size(); ++i)
    EXPECT_EQ(down[i]["stats"]["remote"]["front_recomputed"], plain[i]["stats"]["remote"]["positions_hit"]);
}

}  // namespace
