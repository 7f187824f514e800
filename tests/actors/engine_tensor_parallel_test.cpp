// The engine at tensor-parallel degrees 2 and 4 (EngineConfig::tp) on the bundled
// model (4 query heads, 2 KV heads: at degree 4 each KV head is on two ranks):
// vericache equals full bit for bit with many requests in flight, the engine equals
// TpGenerator at the same degree, bad degrees and unsupported options are named,
// and a rank's failure fails its request alone.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <vericache/engine.hpp>

#include "runtime/tp_generator.hpp"
#include "tests/error_naming.hpp"
#include "tests/runtime/test_support.hpp"

namespace {

using vericache::Engine;
using vericache::EngineConfig;
using vericache::Request;

EngineConfig config(int tp) {
  EngineConfig c;
  c.model_dir = VC_MODEL_DIR;
  c.tp = tp;
  c.max_active = 64;
  c.trace = true;
  return c;
}

std::vector<int32_t> prompt(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  const auto& c = vc::test::tinycode()->config();
  return vc::test::random_tokens(rng, n, c.vocab_size, c.bos_token_id);
}

Request request(const std::vector<int32_t>& p, const std::string& mode, int max_tokens,
                bool sampled) {
  Request r;
  r.prompt_ids = p;
  r.mode = mode;
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  r.fold_every = 8;  // views are rebuilt (through the gathered plan) during the run
  if (sampled) {
    r.temperature = 0.8f;
    r.top_k = 50;
    r.seed = 1234;
  }
  return r;
}

void expect_identical(const vericache::Result& want, const vericache::Result& got,
                      const std::string& what) {
  ASSERT_TRUE(want.ok) << what << ": " << want.error;
  ASSERT_TRUE(got.ok) << what << ": " << got.error;
  EXPECT_EQ(got.output_ids, want.output_ids) << what;
  EXPECT_EQ(got.output_logprobs, want.output_logprobs) << what << ": logprobs differ in some bit";
}

void vericache_equals_full_with_requests_in_flight(int tp) {
  Engine engine(config(tp));
  const std::vector<std::string> methods = {"snapkv", "streaming_llm", "laprox", "kivi",
                                            "snapkv+kivi"};
  struct Sub {
    std::string what;
    Engine::Submission full, vc;
  };
  std::vector<Sub> subs;
  for (bool sampled : {false, true})
    for (size_t m = 0; m < methods.size(); ++m)
      for (const char* draft : {"1", "6", "16"}) {
        const auto p = prompt(60 + 37 * m, uint32_t(m * 7 + (sampled ? 100 : 0)));
        Request v = request(p, "vericache", 24, sampled);
        v.compressor = methods[m];
        v.draft = draft;
        const std::string what = "tp " + std::to_string(tp) + " " + methods[m] + " draft " +
                                 draft + (sampled ? " sampled" : " greedy");
        // Every request is in flight at once: full and vericache interleave.
        subs.push_back({what, engine.submit(request(p, "full", 24, sampled)), engine.submit(v)});
      }
  for (Sub& s : subs) {
    const auto full = s.full.result.get(), vc = s.vc.result.get();
    expect_identical(full, vc, s.what);
    EXPECT_GT(vc.stats.rounds, 0u) << s.what;
    EXPECT_GT(vc.stats.compressed_bytes, 0u) << s.what;
  }
  const auto st = engine.stats();
  EXPECT_EQ(st.tp, tp);
  EXPECT_EQ(st.completed, subs.size() * 2);
  EXPECT_GT(st.full_tier_bytes_read_verify, 0u);
  // Releases travel by message: give the mover a moment to free every rank's KV.
  for (int i = 0; i < 200 && engine.stats().full_tier_bytes_held > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(engine.stats().full_tier_bytes_held, 0u) << "every rank's full tier is empty at the end";
}

TEST(engine_tensor_parallel, vericache_equals_full_bit_for_bit_at_degree_two) {
  vericache_equals_full_with_requests_in_flight(2);
}

TEST(engine_tensor_parallel, vericache_equals_full_bit_for_bit_at_degree_four) {
  vericache_equals_full_with_requests_in_flight(4);
}

TEST(engine_tensor_parallel, equals_tp_generator_at_the_same_degree_bit_for_bit) {
  // Same shards, same reduction order: the engine at tp 2 gives TpGenerator's bits.
  vc::GeneratorConfig gc;
  gc.max_context = 1024;
  vc::TpGenerator gen(vc::test::tinycode(), vc::test::tinycode_tokenizer(), 2, gc);
  Engine engine(config(2));
  for (bool sampled : {false, true})
    for (const char* mode : {"full", "vericache", "lossy"}) {
      const auto p = prompt(140, sampled ? 5 : 6);
      Request r = request(p, mode, 20, sampled);
      r.compressor = "snapkv";
      r.ratio = 4;
      r.draft = "6";
      vc::GenerateOptions o;
      o.mode = vc::parse_decode_mode(mode);
      o.max_tokens = r.max_tokens;
      o.stop_at_eos = false;
      o.compressor = r.compressor;
      o.ratio = r.ratio;
      o.draft_length = 6;
      o.fold_every = r.fold_every;
      o.sampling = {r.temperature, r.top_k, r.top_p, r.seed};
      const auto want = gen.generate(p, o);
      const auto got = engine.submit(r).result.get();
      ASSERT_TRUE(got.ok) << got.error;
      const std::string what = std::string(mode) + (sampled ? " sampled" : " greedy");
      EXPECT_EQ(got.output_ids, want.output_ids) << what;
      EXPECT_EQ(got.output_logprobs, want.output_logprobs) << what;
    }
}

TEST(engine_tensor_parallel, the_adaptive_draft_length_at_degree_two_decodes_full_decodings_bits) {
  // One policy per request in the scheduler: every rank drafts the length it chose.
  Engine engine(config(2));
  std::vector<Engine::Submission> full, vc;
  for (uint32_t i = 0; i < 4; ++i) {
    const bool sampled = i % 2 == 1;
    const auto p = prompt(70 + 30 * i, 300 + i);
    full.push_back(engine.submit(request(p, "full", 40, sampled)));
    Request r = request(p, "vericache", 40, sampled);
    r.draft = "auto";
    r.compressor = i < 2 ? "snapkv" : "kivi";
    vc.push_back(engine.submit(r));
  }
  size_t rounds = 0;
  for (size_t i = 0; i < full.size(); ++i) {
    const auto want = full[i].result.get(), got = vc[i].result.get();
    ASSERT_TRUE(want.ok) << want.error;
    ASSERT_TRUE(got.ok) << got.error;
    expect_identical(want, got, "request " + std::to_string(i));
    rounds += got.stats.rounds;
  }
  EXPECT_GT(rounds, 0u) << "the requests verified drafts";
}

TEST(engine_tensor_parallel, bad_degrees_are_named_a_bad_request_fails_alone_and_kvzap_runs) {
  vc::test::expect_error_naming([] { Engine e(config(0)); }, "EngineConfig.tp: must be at least 1, got 0");
  vc::test::expect_error_naming(
      [] { Engine e(config(3)); },
      "EngineConfig.tp: tensor parallelism: degree 3 does not split the model's 4 attention heads");
  vc::test::expect_error_naming(
      [] { Engine e(config(8)); },
      "EngineConfig.tp: tensor parallelism: degree 8 does not split the model's 4 attention heads");

  // Per request: a bad one fails alone; KVzap (model-wide hidden-state scores) runs
  // at degree 2 and decodes full decoding's bits.
  Engine engine(config(2));
  Request r = request(prompt(120, 1), "vericache", 16, false);
  r.draft = "4";
  r.compressor = "nonsense";
  auto b = engine.submit(r).result.get();
  EXPECT_FALSE(b.ok);
  EXPECT_NE(b.error.find("nonsense"), std::string::npos) << b.error;
  r.compressor = "kvzap";
  const auto c = engine.submit(r).result.get();
  const auto full = engine.submit(request(prompt(120, 1), "full", 16, false)).result.get();
  expect_identical(full, c, "kvzap at degree 2");
  EXPECT_GT(c.stats.rounds, 0u);
}

TEST(engine_tensor_parallel, budgets_are_per_rank_and_each_rank_stays_within_its_reservation) {
  EngineConfig cfg = config(2);
  cfg.fast_memory_bytes = size_t(3) << 20;  // per rank; 1 MiB of it is the staging buffers
  Engine engine(cfg);
  std::vector<Engine::Submission> subs;
  for (uint32_t i = 0; i < 6; ++i) {
    Request r = request(prompt(80 + 40 * i, 50 + i), i % 3 == 2 ? "full" : "vericache", 24, i % 2);
    r.compressor = i % 3 == 0 ? "laprox" : "snapkv";  // laprox selects model-wide
    r.draft = "8";
    subs.push_back(engine.submit(r));
  }
  for (auto& s : subs) {
    const auto r = s.result.get();
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_GT(r.stats.fast_bytes_peak, 0u);
    EXPECT_LE(r.stats.fast_bytes_peak, r.stats.fast_bytes_reserved)
        << "the fullest rank stays within what admission reserved on each rank";
  }
  const auto st = engine.stats();
  EXPECT_EQ(st.fast_memory_budget, cfg.fast_memory_bytes);
  EXPECT_LE(st.fast_memory_peak, cfg.fast_memory_bytes);
  // A request whose per-rank need exceeds the per-rank budget fails, naming both.
  Request huge = request(prompt(3000, 77), "full", 100, false);
  const auto h = engine.submit(huge).result.get();
  EXPECT_FALSE(h.ok);
  EXPECT_NE(h.error.find("of fast memory (a prompt of 3000 tokens, up to 100 new), more than the"),
            std::string::npos) << h.error;
  EXPECT_NE(h.error.find("per rank"), std::string::npos) << h.error;
}

TEST(engine_tensor_parallel, a_failing_rank_fails_its_request_with_its_error_and_the_engine_serves_on) {
  // Disk tiers, one per rank. Once the victim has tokens, ONE rank's file of it
  // goes behind its tier's back: that rank's next read fails, the group is aborted
  // (the other rank is waiting in a collective), the victim fails with the failing
  // rank's error, and the other requests, and a later one, are served exactly.
  const auto dir = std::filesystem::temp_directory_path() / "vericache-engine-tp-test-fail";
  std::filesystem::remove_all(dir);
  struct RemoveAfter {
    std::filesystem::path p;
    ~RemoveAfter() { std::filesystem::remove_all(p); }
  } remove_after{dir};
  EngineConfig cfg = config(2);
  cfg.full_tier = "disk";
  cfg.disk_dir = dir.string();
  vc::GeneratorConfig gc;
  gc.max_context = 1024;
  vc::TpGenerator gen(vc::test::tinycode(), vc::test::tinycode_tokenizer(), 2, gc);
  auto expected = [&](const Request& r) {
    vc::GenerateOptions o;
    o.mode = vc::DecodeMode::full;
    o.max_tokens = r.max_tokens;
    o.stop_at_eos = false;
    return gen.generate(r.prompt_ids, o).output_ids;
  };
  Engine engine(cfg);
  Request victim = request(prompt(80, 9), "vericache", 300, false);
  victim.draft = "8";
  std::atomic<int> tokens{0};
  std::atomic<int> removed{0};
  auto v = engine.submit(victim, [&](uint64_t id, int32_t) {
    if (++tokens != 3) return;
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir))
      if (e.path().filename().string() == "req-" + std::to_string(id) + ".kv") {
        std::filesystem::remove(e.path());
        ++removed;
        break;  // one rank only
      }
  });
  std::vector<Request> others;
  std::vector<Engine::Submission> subs;
  for (uint32_t i = 0; i < 3; ++i) {
    others.push_back(request(prompt(50 + 30 * i, 20 + i), "vericache", 24, false));
    others.back().draft = "6";
    subs.push_back(engine.submit(others.back()));
  }
  const auto rv = v.result.get();
  EXPECT_EQ(removed.load(), 1);
  EXPECT_FALSE(rv.ok);
  EXPECT_NE(rv.error.find(".kv"), std::string::npos) << rv.error;
  EXPECT_EQ(rv.error.find("tensor parallelism: rank"), std::string::npos)
      << "the failing rank's own error, not the abort another rank saw: " << rv.error;
  for (size_t i = 0; i < others.size(); ++i) {
    const auto r = subs[i].result.get();
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_EQ(r.output_ids, expected(others[i])) << i;
  }
  Request later = request(prompt(70, 40), "vericache", 16, false);
  const auto rl = engine.submit(later).result.get();
  ASSERT_TRUE(rl.ok) << rl.error;
  EXPECT_EQ(rl.output_ids, expected(later));
}

}  // namespace
