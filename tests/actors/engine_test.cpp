// The actor runtime through its public API: concurrent requests are bit-identical
// to running each alone with full-KV decoding; cancellation, failure isolation and
// shutdown.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <iterator>
#include <future>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include <vericache/engine.hpp>

#include "runtime/generator.hpp"
#include "tests/runtime/test_support.hpp"

namespace {

using vericache::Engine;
using vericache::EngineConfig;

EngineConfig config(size_t max_active = 64) {
  EngineConfig c;
  c.model_dir = VC_MODEL_DIR;
  c.max_active = max_active;
  c.trace = true;
  return c;
}

struct Case {
  vericache::Request req;
  std::vector<int32_t> expected_ids;
  std::vector<float> expected_logprobs;
};

// Mixed prompt lengths, compressors, ratios, draft lengths and sampling; the
// expected output is plain full-KV decoding of the same request, alone.
// `force_mode`: every request in that mode instead of the mix; `block_tokens`: the
// KV block of the expected run (the engine's must be the same).
std::vector<Case> make_cases(size_t n, uint32_t seed, size_t common_prefix = 0,
                             const char* force_mode = nullptr,
                             size_t block_tokens = vc::kDefaultBlockTokens) {
  std::mt19937 rng(seed);
  const auto model = vc::test::tinycode();
  const auto& cfg = model->config();
  vc::GeneratorConfig gc;
  gc.max_context = 2048;
  gc.block_tokens = block_tokens;
  vc::Generator gen(model, vc::test::tinycode_tokenizer(), gc);
  const char* methods[] = {"streaming_llm", "snapkv", "h2o", "expected_attention", "kvzip",
                           "laprox", "kivi", "kvquant", "rotate_kv", "snapkv+kivi", "kvzap"};
  const char* drafts[] = {"1", "4", "16", "30", "auto"};
  std::vector<Case> cases(n);
  for (size_t i = 0; i < n; ++i) {
    Case& c = cases[i];
    c.req.prompt_ids = vc::test::random_tokens(rng, 20 + rng() % 300, cfg.vocab_size, cfg.bos_token_id);
    if (common_prefix > 0) {  // every request starts with the same system prompt
      std::mt19937 same(seed + 1);
      auto head = vc::test::random_tokens(same, common_prefix, cfg.vocab_size, cfg.bos_token_id);
      c.req.prompt_ids.insert(c.req.prompt_ids.begin(), head.begin(), head.end());
    }
    c.req.max_tokens = 16 + int(rng() % 40);
    c.req.mode = i % 7 == 6 ? "full" : (i % 11 == 10 ? "lossy" : "vericache");
    if (force_mode != nullptr) c.req.mode = force_mode;
    c.req.compressor = methods[rng() % std::size(methods)];
    c.req.ratio = double(2 << (rng() % 3));
    c.req.draft = drafts[rng() % 5];
    c.req.ignore_eos = true;
    c.req.fold_every = i % 3 == 0 ? 8 : 64;  // some requests rebuild their view often
    if (i % 2 == 1) {
      c.req.temperature = 0.8f;
      c.req.top_k = 50;
      c.req.seed = rng();
    }
    vc::GenerateOptions o;
    o.max_tokens = c.req.max_tokens;
    o.stop_at_eos = false;
    o.sampling = {c.req.temperature, c.req.top_k, c.req.top_p, c.req.seed};
    o.fold_every = c.req.fold_every;
    if (c.req.mode == "lossy") {
      o.mode = vc::DecodeMode::lossy;
      o.compressor = c.req.compressor;
      o.ratio = c.req.ratio;
    }
    const auto r = gen.generate(c.req.prompt_ids, o);
    c.expected_ids = r.output_ids;
    c.expected_logprobs = r.output_logprobs;
  }
  return cases;
}

// Submits every case to `engine` at once; each result must be its full decoding.
void expect_full_decoding(Engine& engine, const std::vector<Case>& cases, const std::string& what) {
  std::vector<Engine::Submission> subs;
  for (const auto& c : cases) subs.push_back(engine.submit(c.req));
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto r = subs[i].result.get();
    ASSERT_TRUE(r.ok) << what << " request " << i << ": " << r.error;
    EXPECT_EQ(r.output_ids, cases[i].expected_ids) << what << " request " << i;
    EXPECT_EQ(r.output_logprobs, cases[i].expected_logprobs) << what << " request " << i;
  }
}

void run_concurrently(size_t n) {
  const auto cases = make_cases(n, uint32_t(1000 + n));
  Engine engine(config(n));
  std::vector<Engine::Submission> subs;
  for (const auto& c : cases) subs.push_back(engine.submit(c.req));
  for (size_t i = 0; i < n; ++i) {
    const auto r = subs[i].result.get();
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_EQ(r.output_ids, cases[i].expected_ids)
        << "request " << i << " mode " << cases[i].req.mode << " " << cases[i].req.compressor
        << " draft " << cases[i].req.draft;
    EXPECT_EQ(r.output_logprobs, cases[i].expected_logprobs) << "request " << i;
  }
  const auto s = engine.stats();
  EXPECT_EQ(s.completed, n);
  EXPECT_GT(s.busy_fraction.at("drafter"), 0.0);
}

TEST(engine, busy_fraction_over_a_window_counts_only_the_work_inside_it) {
  const auto cases = make_cases(2, 77);
  Engine engine(config(2));
  const auto before = std::chrono::steady_clock::now();
  std::vector<Engine::Submission> subs;
  for (const auto& c : cases) subs.push_back(engine.submit(c.req));
  for (auto& sub : subs) ASSERT_TRUE(sub.result.get().ok);
  const auto after = std::chrono::steady_clock::now();
  const auto during = engine.busy_fraction(before, after);
  EXPECT_GT(during.at("drafter"), 0.0);
  EXPECT_LE(during.at("drafter"), 1.0);
  // A window that ends before the first submission holds no work.
  const auto earlier = engine.busy_fraction(before - std::chrono::seconds(10), before);
  EXPECT_EQ(earlier.at("drafter"), 0.0);
  // Over a window twice as long, the same work is half the share (to rounding).
  const auto wider = engine.busy_fraction(before - (after - before), after);
  EXPECT_NEAR(wider.at("drafter"), during.at("drafter") / 2, 1e-9);
}

TEST(engine, one_request_matches_full_decoding_bit_for_bit) { run_concurrently(1); }
TEST(engine, four_concurrent_requests_match_full_decoding_bit_for_bit) { run_concurrently(4); }
TEST(engine, sixteen_concurrent_requests_match_full_decoding_bit_for_bit) { run_concurrently(16); }
TEST(engine, sixty_four_concurrent_requests_match_full_decoding_bit_for_bit) { run_concurrently(64); }

TEST(engine, every_block_size_gives_the_output_of_full_decoding_at_that_size) {
  EXPECT_EQ(config().block_tokens, vc::kDefaultBlockTokens);
  for (const size_t bt : {size_t(16), size_t(100)}) {
    const auto cases = make_cases(6, uint32_t(5150 + bt), 0, nullptr, bt);
    EngineConfig cfg = config(6);
    cfg.block_tokens = bt;
    Engine engine(cfg);
    expect_full_decoding(engine, cases, "block " + std::to_string(bt));
  }
}

TEST(engine, a_block_size_outside_1_to_4096_is_a_clear_error) {
  for (const size_t bt : {size_t(0), size_t(4097)}) {
    EngineConfig cfg = config(1);
    cfg.block_tokens = bt;
    try {
      Engine engine(cfg);
      ADD_FAILURE() << "block_tokens " << bt << " accepted";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find("EngineConfig.block_tokens"), std::string::npos) << e.what();
    }
  }
}

TEST(engine, a_device_it_cannot_use_is_a_clear_error_naming_the_field) {
  // A bad name; cuda with tensor parallelism (ranks run on the CPU); a GPU past the
  // machine's (none here, or fewer than 100).
  for (const auto& [device, tp] : {std::pair{"gpu", 1}, std::pair{"cuda:0", 2}, std::pair{"cuda:99", 1}}) {
    EngineConfig cfg = config(1);
    cfg.device = device;
    cfg.tp = tp;
    try {
      Engine engine(cfg);
      ADD_FAILURE() << "device " << device << " with tp " << tp << " accepted";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find("EngineConfig.device"), std::string::npos) << e.what();
    }
  }
}

TEST(engine, requests_sharing_a_prompt_prefix_share_its_blocks_and_match_full_decoding) {
  const auto cases = make_cases(8, 4242, 160);
  Engine engine(config(8));
  std::vector<Engine::Submission> subs;
  for (const auto& c : cases) subs.push_back(engine.submit(c.req));
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto r = subs[i].result.get();
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_EQ(r.output_ids, cases[i].expected_ids) << "request " << i;
    EXPECT_EQ(r.output_logprobs, cases[i].expected_logprobs) << "request " << i;
  }
}

TEST(engine, lossy_output_of_methods_that_read_every_prompt_query_does_not_depend_on_what_shares_the_prompt) {
  // H2O and KVzip sum attention over every prompt query, ExpectedAttention takes the
  // moments of every query: a request must compute them all even when another live
  // request published the same leading blocks. 16 concurrent lossy requests with a
  // common 200-token prefix each equal their solo run.
  std::mt19937 rng(77);
  const auto model = vc::test::tinycode();
  const auto& cfg = model->config();
  vc::GeneratorConfig gc;
  gc.max_context = 2048;
  vc::Generator gen(model, vc::test::tinycode_tokenizer(), gc);
  std::mt19937 same(78);
  const auto head = vc::test::random_tokens(same, 200, cfg.vocab_size, cfg.bos_token_id);
  const char* methods[] = {"h2o", "kvzip", "expected_attention"};
  std::vector<Case> cases(16);
  for (size_t i = 0; i < cases.size(); ++i) {
    Case& c = cases[i];
    c.req.prompt_ids = head;
    const auto tail = vc::test::random_tokens(rng, 2 + rng() % 60, cfg.vocab_size, -1);
    c.req.prompt_ids.insert(c.req.prompt_ids.end(), tail.begin() + 1, tail.end());
    c.req.max_tokens = 12;
    c.req.mode = "lossy";
    c.req.compressor = methods[i % 3];
    c.req.ratio = 4.0;
    c.req.ignore_eos = true;
    if (i % 2 == 1) {
      c.req.temperature = 0.8f;
      c.req.top_k = 50;
      c.req.seed = rng();
    }
    vc::GenerateOptions o;
    o.max_tokens = c.req.max_tokens;
    o.stop_at_eos = false;
    o.sampling = {c.req.temperature, c.req.top_k, c.req.top_p, c.req.seed};
    o.mode = vc::DecodeMode::lossy;
    o.compressor = c.req.compressor;
    o.ratio = c.req.ratio;
    const auto r = gen.generate(c.req.prompt_ids, o);  // solo: nothing else runs
    c.expected_ids = r.output_ids;
    c.expected_logprobs = r.output_logprobs;
  }
  Engine engine(config(16));
  std::vector<Engine::Submission> subs;
  for (const auto& c : cases) subs.push_back(engine.submit(c.req));
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto r = subs[i].result.get();
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_EQ(r.output_ids, cases[i].expected_ids) << "request " << i << " " << cases[i].req.compressor;
    EXPECT_EQ(r.output_logprobs, cases[i].expected_logprobs) << "request " << i;
  }
}

TEST(engine, lockstep_gives_the_same_output_as_staggered) {
  const auto cases = make_cases(6, 99);
  auto cfg = config(6);
  cfg.lockstep = true;
  Engine engine(cfg);
  expect_full_decoding(engine, cases, "lockstep");
}

// Lossy decoding drifts from full decoding, but each request must still equal the
// same lossy request run alone: sharing prefix blocks must not leak between them.
// `kvzip_only`: check the kvzip cases alone, else every other case.
void check_lossy_with_shared_prefix(bool kvzip_only) {
  const auto cases = make_cases(10, 777, 160, "lossy");
  Engine engine(config(10));
  std::vector<Engine::Submission> subs;
  for (const auto& c : cases) subs.push_back(engine.submit(c.req));
  size_t checked = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto r = subs[i].result.get();
    ASSERT_TRUE(r.ok) << r.error;
    if ((cases[i].req.compressor.find("kvzip") != std::string::npos) != kvzip_only) continue;
    ++checked;
    EXPECT_EQ(r.output_ids, cases[i].expected_ids) << "request " << i << " " << cases[i].req.compressor;
    EXPECT_EQ(r.output_logprobs, cases[i].expected_logprobs) << "request " << i;
  }
  EXPECT_GT(checked, 0u);
}

TEST(engine, lossy_requests_sharing_a_prompt_prefix_match_their_solo_runs) {
  check_lossy_with_shared_prefix(false);
}

// Found by the test above: kvzip's statistics need every prompt query, which
// prefix sharing skipped. Lossy prefill now streams through the full tier and
// never shares blocks, and methods that read every query share nothing anyway.
TEST(engine, lossy_kvzip_requests_sharing_a_prompt_prefix_match_their_solo_runs) {
  check_lossy_with_shared_prefix(true);
}

TEST(engine, stats_called_from_a_token_callback_answers_without_blocking) {
  Engine engine(config());
  vericache::Request r;
  r.prompt = "<|begin_of_text|>def main():\n";
  r.max_tokens = 20;
  r.ignore_eos = true;
  std::atomic<size_t> calls{0}, max_tokens_seen{0};
  std::atomic<double> slowest{0};
  auto sub = engine.submit(r, [&](uint64_t, int32_t) {
    const auto t0 = std::chrono::steady_clock::now();
    const vericache::EngineStats s = engine.stats();  // on the scheduler thread
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (dt > slowest) slowest = dt;
    max_tokens_seen = std::max<size_t>(max_tokens_seen, s.tokens);
    ++calls;
  });
  // Guard: a stats() that waits for the scheduler would deadlock here.
  ASSERT_EQ(sub.result.wait_for(std::chrono::seconds(20)), std::future_status::ready)
      << "stats() inside the callback blocked the scheduler";
  const auto res = sub.result.get();
  ASSERT_TRUE(res.ok) << res.error;
  EXPECT_EQ(calls, res.output_ids.size());
  EXPECT_EQ(max_tokens_seen, res.output_ids.size()) << "counts are current inside the callback";
  EXPECT_LT(slowest, 0.5) << "stats() took " << slowest << " s";
  EXPECT_EQ(engine.stats().completed, 1u);
}

TEST(engine, two_engines_sharing_a_disk_dir_match_full_decoding_and_leave_it_empty) {
  char tmpl[] = "/tmp/vc-engine-disk-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  std::ofstream(dir + "/req-1.kv") << "a file of the user's";
  const auto cases = make_cases(8, 777);
  {
    auto cfg = config(4);
    cfg.full_tier = "disk";
    cfg.disk_dir = dir;
    Engine a(cfg), b(cfg);  // both number their requests from 1
    std::vector<Engine::Submission> sa, sb;
    for (size_t i = 0; i < cases.size(); ++i) {  // interleaved submissions
      sa.push_back(a.submit(cases[i].req));
      sb.push_back(b.submit(cases[cases.size() - 1 - i].req));
    }
    for (size_t i = 0; i < cases.size(); ++i) {
      const auto ra = sa[i].result.get(), rb = sb[i].result.get();
      ASSERT_TRUE(ra.ok) << ra.error;
      ASSERT_TRUE(rb.ok) << rb.error;
      EXPECT_EQ(ra.output_ids, cases[i].expected_ids) << "engine a, request " << i;
      EXPECT_EQ(ra.output_logprobs, cases[i].expected_logprobs) << "engine a, request " << i;
      const auto& cb = cases[cases.size() - 1 - i];
      EXPECT_EQ(rb.output_ids, cb.expected_ids) << "engine b, request " << i;
      EXPECT_EQ(rb.output_logprobs, cb.expected_logprobs) << "engine b, request " << i;
    }
  }
  std::vector<std::string> left;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    left.push_back(e.path().filename().string());
  EXPECT_EQ(left, std::vector<std::string>{"req-1.kv"});
  std::ifstream in(dir + "/req-1.kv");
  std::string body;
  std::getline(in, body);
  EXPECT_EQ(body, "a file of the user's");
  std::filesystem::remove_all(dir);
}

TEST(engine, streams_tokens_through_the_callback_in_order) {
  Engine engine(config());
  vericache::Request r;
  r.prompt = "<|begin_of_text|>def main():\n";
  r.max_tokens = 30;
  r.ignore_eos = true;
  std::vector<int32_t> seen;
  auto sub = engine.submit(r, [&](uint64_t, int32_t t) { seen.push_back(t); });
  const auto res = sub.result.get();
  EXPECT_EQ(seen, res.output_ids);
}

TEST(engine, a_cancelled_request_frees_its_full_kv_and_the_others_finish) {
  Engine engine(config());
  vericache::Request slow;
  slow.prompt = "<|begin_of_text|>import os\n";
  slow.max_tokens = 1500;
  slow.ignore_eos = true;
  slow.draft = "4";
  std::atomic<bool> started{false};
  auto a = engine.submit(slow, [&](uint64_t, int32_t) { started = true; });
  vericache::Request quick = slow;
  quick.max_tokens = 20;
  auto b = engine.submit(quick);
  while (!started) std::this_thread::yield();
  engine.cancel(a.id);
  const auto ra = a.result.get();
  EXPECT_EQ(ra.finish_reason, "cancelled");
  EXPECT_LT(ra.output_ids.size(), 1500u);
  EXPECT_EQ(b.result.get().output_ids.size(), 20u);
  // Releases travel by message: give the mover a moment to free the full KV.
  for (int i = 0; i < 200 && engine.stats().full_tier_bytes_held > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(engine.stats().full_tier_bytes_held, 0u);
}

TEST(engine, a_request_whose_full_kv_is_lost_fails_alone_with_its_error) {
  const auto dir = std::filesystem::temp_directory_path() / "vericache-engine-test-fail";
  std::filesystem::remove_all(dir);
  struct RemoveAfter {  // the tier keeps the directory it is given; destroyed after `engine`
    std::filesystem::path p;
    ~RemoveAfter() { std::filesystem::remove_all(p); }
  } remove_after{dir};
  auto cfg = config();
  cfg.full_tier = "disk";
  cfg.disk_dir = dir.string();
  Engine engine(cfg);
  vericache::Request victim;
  victim.prompt = "<|begin_of_text|>class Foo:\n";
  victim.max_tokens = 400;
  victim.ignore_eos = true;
  victim.draft = "8";
  std::atomic<int> tokens{0};
  uint64_t victim_id = 0;
  auto v = engine.submit(victim, [&](uint64_t id, int32_t) {
    if (++tokens == 3) {  // on the scheduler's thread: the file goes behind the tier's back
      for (const auto& e : std::filesystem::recursive_directory_iterator(dir))
        if (e.path().filename().string() == "req-" + std::to_string(id) + ".kv")
          std::filesystem::remove(e.path());
      victim_id = id;
    }
  });
  const auto cases = make_cases(3, 5);
  std::vector<Engine::Submission> others;
  for (const auto& c : cases) others.push_back(engine.submit(c.req));
  const auto rv = v.result.get();
  EXPECT_FALSE(rv.ok);
  EXPECT_NE(rv.error.find("req-" + std::to_string(victim_id) + ".kv"), std::string::npos) << rv.error;
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto r = others[i].result.get();
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_EQ(r.output_ids, cases[i].expected_ids);
  }
}

TEST(engine, rejects_a_bad_request_with_a_clear_error_and_serves_the_next) {
  Engine engine(config());
  vericache::Request bad;
  bad.prompt = "x";
  bad.compressor = "nope";
  const auto r = engine.submit(bad).result.get();
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("nope"), std::string::npos) << r.error;
  bad.compressor = "snapkv";
  bad.draft = "lots";
  EXPECT_NE(engine.submit(bad).result.get().error.find("draft"), std::string::npos);
  vericache::Request good;
  good.prompt = "def f(x):";
  good.max_tokens = 5;
  EXPECT_TRUE(engine.submit(good).result.get().ok);
}

TEST(engine, answers_overloaded_when_the_queue_is_full) {
  auto cfg = config(1);
  cfg.max_queue = 1;
  Engine engine(cfg);
  vericache::Request r;
  r.prompt = "import sys\n";
  r.max_tokens = 200;
  r.ignore_eos = true;
  std::vector<Engine::Submission> subs;
  for (int i = 0; i < 4; ++i) subs.push_back(engine.submit(r));
  size_t overloaded = 0;
  for (auto& s : subs) {
    const auto res = s.result.get();
    overloaded += !res.ok && res.error.find("overloaded") != std::string::npos;
  }
  EXPECT_EQ(overloaded, 2u);
}

TEST(engine, shuts_down_cleanly_with_requests_in_flight) {
  std::vector<Engine::Submission> subs;
  {
    Engine engine(config());
    vericache::Request r;
    r.prompt = "import sys\n";
    r.max_tokens = 3000;
    r.ignore_eos = true;
    for (int i = 0; i < 3; ++i) subs.push_back(engine.submit(r));
  }  // must not hang
  for (auto& s : subs) EXPECT_EQ(s.result.get().finish_reason, "cancelled");
}

TEST(engine, a_request_submitted_from_a_token_callback_while_the_engine_shuts_down_resolves) {
  // A callback holds its actor until the engine's destructor has begun, then
  // submits (the shutdown sent meanwhile): the follow-up resolves (cancelled, or refused as shutting down), and
  // never as a broken promise.
  std::atomic<bool> destroying{false}, submitted{false};
  std::atomic<int> tokens{0};
  std::optional<Engine::Submission> follow;
  std::vector<Engine::Submission> subs;
  {
    Engine engine(config());
    vericache::Request r;
    r.prompt = "import sys\n";
    r.max_tokens = 3000;
    r.ignore_eos = true;
    for (int i = 0; i < 2; ++i)
      subs.push_back(engine.submit(r, [&](uint64_t, int32_t) {
        if (++tokens < 4 || submitted.exchange(true)) return;
        while (!destroying) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        follow = engine.submit(r);
      }));
    while (tokens < 4) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    destroying = true;
  }
  ASSERT_TRUE(follow.has_value()) << "the callback ran once the destructor had begun";
  vericache::Result res;
  ASSERT_NO_THROW(res = follow->result.get());
  EXPECT_FALSE(res.ok);
  EXPECT_TRUE(res.finish_reason == "cancelled" || res.error.find("shutting down") != std::string::npos)
      << res.finish_reason << ": " << res.error;
  for (auto& s : subs) EXPECT_EQ(s.result.get().finish_reason, "cancelled");
}

TEST(engine, writes_a_chrome_trace_with_a_track_per_resource) {
  Engine engine(config());
  vericache::Request r;
  r.prompt = "def f(x):";
  r.max_tokens = 24;
  r.ignore_eos = true;
  (void)engine.submit(r).result.get();
  const auto path = std::filesystem::temp_directory_path() / "vericache-trace-test.json";
  engine.write_trace(path.string());
  const auto j = vc::test::read_json(path.string());
  std::set<std::string> tracks, slices;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "M") tracks.insert(e["args"]["name"].get<std::string>());
    if (e["ph"] == "X") slices.insert(e["name"].get<std::string>());
  }
  for (const char* t : {"drafter", "mover", "verifier"}) EXPECT_TRUE(tracks.count(t)) << t;
  for (const char* s : {"draft step", "verify pass", "layer 0 transfer"}) EXPECT_TRUE(slices.count(s)) << s;
  std::filesystem::remove(path);
}

}  // namespace
