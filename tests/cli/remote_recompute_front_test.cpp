// `generate --remote ... --remote-flow full --remote-recompute-front` against a real
// redis-server: the cached prefix's chunks come from the last one down while the
// prefix is prefilled from the first one up until they meet. Whichever side takes a
// chunk, the tokens and logprobs equal full decoding bit for bit, and together the
// two cover the prefix the plain full flow takes; a corrupt or dead store leaves the
// local prefill to cover all of it; a tensor-parallel group's ranks meet their own
// fetches at one chunk.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "tests/cli/cli_support.hpp"
#include "tests/cli/corrupt_chunks.hpp"
#include "tests/cli/generate_json.hpp"
#include "tests/cli/prompt_file.hpp"
#include "tests/kvtiers/redis_server.hpp"

namespace {

using nlohmann::json;
using vc::test::expect_same_tokens;

std::string code_prompt() {  // a few hundred tokens of code
  std::string p = "<|begin_of_text|>";
  for (int i = 0; i < 14; ++i)
    p += "def g" + std::to_string(i) + "(y):\n    return y - " + std::to_string(i) + " * " +
         std::to_string(i + 2) + "\n\n";
  return p + "class Queue:\n    def put(self, item):";
}

// Blocks of 16 positions and chunks of 32: the prompt spans many chunks.
json generate(const std::string& args) { return vc::test::generate_json(args + " --block-tokens 16"); }

size_t covered(const json& j) {  // prefix positions fetched or recomputed in front
  const json& r = j["stats"]["remote"];
  return r["positions_hit"].get<size_t>() + r.value("front_recomputed", size_t(0));
}

TEST(remote_recompute_front, the_fetched_back_and_the_prefilled_front_give_full_decodings_tokens) {
  vc::test::RedisServer server;
  VC_REQUIRE_REDIS(server);
  vc::test::PromptFile prompt(code_prompt());
  const std::string remote = " --remote " + server.url() + " --remote-chunk 32 --remote-flow full";
  for (const std::string sampling : {"", " --temperature 0.7 --top-k 40 --seed 5"}) {
    const std::string common =
        "--prompt-file " + prompt.path + " --max-tokens 20 --json --logprobs --ignore-eos" + sampling;
    const std::string base = common + " --mode vericache --compressor snapkv --ratio 4 --draft 8";
    const json full = generate(common);
    (void)generate(base + remote);  // publishes
    const json plain = generate(base + remote);
    const json met = generate(base + remote + " --remote-recompute-front");
    const json met_disk = generate(base + remote + " --remote-recompute-front --full-tier disk");
    expect_same_tokens(full, plain, "full flow" + sampling);
    expect_same_tokens(full, met, "recompute front" + sampling);
    expect_same_tokens(full, met_disk, "recompute front, disk tier" + sampling);
    EXPECT_EQ(covered(met_disk), covered(plain)) << met_disk["stats"]["remote"];
    const json& rs = met["stats"]["remote"];
    EXPECT_GT(plain["stats"]["remote"]["chunks_hit"].get<int>(), 3);
    EXPECT_EQ(covered(met), covered(plain)) << rs;
    EXPECT_EQ(rs["positions_hit"].get<int>(), 32 * rs["chunks_hit"].get<int>()) << rs;
    EXPECT_EQ(rs["front_recomputed"].get<int>() % 32, 0) << rs;
  }
}

TEST(remote_recompute_front, chunks_the_store_lacked_are_published_whichever_side_computed_them) {
  vc::test::RedisServer server;
  VC_REQUIRE_REDIS(server);
  const std::string text = code_prompt();
  vc::test::PromptFile shorter(text.substr(0, text.size() / 3)), prompt(text);
  const std::string tail = " --max-tokens 8 --json --logprobs --ignore-eos --mode vericache --compressor snapkv "
                           "--ratio 4 --draft 8 --remote " + server.url() +
                           " --remote-chunk 32 --remote-flow full --remote-timeout-ms 20000";
  const std::string plain = "--prompt-file " + prompt.path + tail;
  // The store holds the first third's chunks (the keys chain over the tokens).
  const size_t held = generate("--prompt-file " + shorter.path + tail)["stats"]["remote"]["chunks_published"];
  ASSERT_GE(held, 2u);
  // The store answers only after a pause: the front computes the whole prefix,
  // past the chunks the store holds, before the back's first reply.
  server.pause();
  std::thread resume([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    server.resume();
  });
  const json met = generate(plain + " --remote-recompute-front");
  resume.join();
  const json& rs = met["stats"]["remote"];
  EXPECT_EQ(rs["chunks_hit"], 0) << rs;
  const size_t prefix = rs["front_recomputed"].get<size_t>();
  ASSERT_GT(prefix, 32 * held) << rs;
  // Every chunk of its prefix is in the store now, those past the held ones too: a
  // plain full flow fetches them all.
  const json again = generate(plain);
  EXPECT_EQ(again["stats"]["remote"]["positions_hit"].get<size_t>(), prefix) << rs << "\n" << again["stats"]["remote"];
}

TEST(remote_recompute_front, a_corrupt_or_dead_store_leaves_the_whole_prefix_to_the_front) {
  vc::test::RedisServer server;
  VC_REQUIRE_REDIS(server);
  vc::test::PromptFile prompt(code_prompt());
  const std::string common = "--prompt-file " + prompt.path + " --max-tokens 20 --json --logprobs --ignore-eos";
  const std::string base = common + " --mode vericache --compressor snapkv --ratio 4 --draft 8";
  const std::string remote = " --remote " + server.url() + " --remote-chunk 32 --remote-flow full";
  const json full = generate(common);
  (void)generate(base + remote);  // publishes
  const size_t prefix = covered(generate(base + remote));
  ASSERT_GT(prefix, 96u);

  // Every chunk's payload flipped: the run from the back ends at the last chunk.
  vc::test::corrupt_every_chunk(server.url());
  json j = generate(base + remote + " --remote-recompute-front");
  expect_same_tokens(full, j, "corrupt");
  EXPECT_EQ(j["stats"]["remote"]["chunks_hit"], 0);
  EXPECT_EQ(j["stats"]["remote"]["front_recomputed"].get<size_t>(), prefix) << j["stats"]["remote"];

  server.kill();
  j = generate(base + remote + " --remote-recompute-front --remote-timeout-ms 300");
  expect_same_tokens(full, j, "store down");
  EXPECT_EQ(j["stats"]["remote"]["chunks_hit"], 0);
  EXPECT_EQ(j["stats"]["remote"]["front_recomputed"].get<size_t>(), prefix) << j["stats"]["remote"];
  EXPECT_FALSE(j["stats"]["remote"]["stop_reason"].get<std::string>().empty());
}

TEST(remote_recompute_front, a_tensor_parallel_group_meets_each_ranks_fetch_at_one_chunk) {
  vc::test::RedisServer server;
  VC_REQUIRE_REDIS(server);
  vc::test::PromptFile prompt(code_prompt());
  const std::string common =
      "--prompt-file " + prompt.path + " --max-tokens 20 --json --logprobs --ignore-eos --tp 2";
  const std::string base = common + " --mode vericache --compressor snapkv --ratio 4 --draft 8";
  const std::string remote = " --remote " + server.url() + " --remote-chunk 32 --remote-flow full";
  const json full = generate(common);  // the group's own numerics
  (void)generate(base + remote);        // every rank publishes its chunks
  const json plain = generate(base + remote);
  const json met = generate(base + remote + " --remote-recompute-front");
  expect_same_tokens(full, met, "tp 2, recompute front");
  EXPECT_GT(plain["stats"]["remote"]["chunks_hit"].get<int>(), 3);
  EXPECT_EQ(covered(met), covered(plain)) << met["stats"]["remote"];
  EXPECT_EQ(met["stats"]["remote"]["front_recomputed"].get<int>() % 32, 0) << met["stats"]["remote"];
}

}  // namespace
