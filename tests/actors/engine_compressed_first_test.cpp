// The engine's compressed-first flow (EngineConfig::remote_compressed_first) against
// a real redis-server on a free loopback port: a request whose prompt's compressed
// chunks are in the store drafts from them at once; in vericache mode it drafts
// ahead from its guess of the first token while the full chunks arrive (a throttled
// link makes them slow; one round ahead or up to the cap), and its tokens and logprobs equal a run without the store
// bit for bit; a lossy request decodes over the fetched view exactly as `generate`'s
// compressed-first flow does; a cancel in the middle leaves nothing behind; a
// longer prompt drafts over a cached shorter one's chunks and publishes the rest.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>

#include "runtime/generator.hpp"
#include "tests/actors/engine_remote_support.hpp"
#include "tests/actors/engine_trace.hpp"
#include "tests/error_naming.hpp"
#include "tools/vericache/throttled_proxy.hpp"

namespace {

using namespace vc::test::engine_remote;

TEST(engine_compressed_first, a_request_drafts_from_compressed_chunks_and_emits_the_tokens_of_full_decoding) {
  vc::test::RedisServer server;
  VC_REQUIRE_REDIS(server);
  struct Case {
    const char* compressor;
    bool sampled;
  };
  size_t kept = 0;
  for (const Case k : {Case{"snapkv", false}, Case{"snapkv", true}, Case{"kivi", false}}) {
    const std::string what = std::string(k.compressor) + (k.sampled ? " seeded" : " greedy");
    const Request req = long_request("vericache", k.compressor, k.sampled);
    Result local;
    {
      Engine plain(config());
      local = run(plain, req);
    }
    server.restart();  // an empty store
    Engine engine(config(server.url()));
    const Result cold = run(engine, req);
    expect_same_output(local, cold, "cold, " + what);
    EXPECT_FALSE(cold.stats.remote_compressed_first) << cold.stats.remote_compressed_stop_reason;
    EXPECT_EQ(2u, cold.stats.remote_compressed_chunks_published) << what;
    wait_for_chunks(server.url(), 4);

    const Result warm = run(engine, req);
    expect_same_output(local, warm, "warm, " + what);
    const auto& s = warm.stats;
    EXPECT_TRUE(s.remote_compressed_first) << what << ": " << s.remote_compressed_stop_reason;
    EXPECT_EQ(2u, s.remote_compressed_chunks_hit) << what;
    EXPECT_EQ(2 * kChunk, s.remote_compressed_positions);
    EXPECT_GT(s.remote_bytes_compressed, 0u);
    EXPECT_LT(s.remote_bytes_compressed, s.remote_bytes_fetched) << "compressed chunks are smaller";
    EXPECT_EQ(2u, s.remote_chunks_hit) << what << ": the full chunks, for verification";
    EXPECT_EQ(0u, s.remote_chunks_published) << "the store had them";
    EXPECT_EQ(0u, held_after_settling(engine)) << what << ": every entry freed";

    // Behind a slow link the drafter drafts from its guess while the full chunks arrive.
    vc::cli::ThrottledProxy slow("127.0.0.1", server.port(), kSlowLinkBytesPerSecond);
    EngineConfig sc = config(slow.url());
    sc.remote_timeout_ms = 60000;
    Engine slow_engine(sc);
    const Result sw = run(slow_engine, req);
    expect_same_output(local, sw, "slow link, " + what);
    EXPECT_TRUE(sw.stats.remote_compressed_first) << sw.stats.remote_compressed_stop_reason;
    EXPECT_GT(sw.stats.remote_predrafted, 6u) << what << ": drafted ahead (more than a round) while the full chunks arrived";
    EXPECT_LE(sw.stats.remote_predrafted, 23u) << what << ": no further than the request's 24 tokens";
    if (sw.stats.remote_predrafts_kept) {
      EXPECT_GE(sw.stats.remote_predraft_rounds, 1u) << what;
    }
    EXPECT_GT(sw.stats.remote_full_wait_seconds, 0.1) << what << ": then waited for them";
    EXPECT_EQ(2u, sw.stats.remote_chunks_hit);
    kept += sw.stats.remote_predrafts_kept ? 1 : 0;
    EXPECT_EQ(0u, held_after_settling(slow_engine));
    if (k.sampled) {  // one round ahead only (remote_predraft 0): the same tokens
      sc.remote_predraft = 0;
      Engine one_round(sc);
      const Result o = run(one_round, req);
      expect_same_output(local, o, "one round ahead, " + what);
      EXPECT_TRUE(o.stats.remote_compressed_first) << o.stats.remote_compressed_stop_reason;
      EXPECT_LE(o.stats.remote_predrafted, 6u) << what;
      EXPECT_EQ(0u, held_after_settling(one_round));
    }
  }
  EXPECT_GT(kept, 0u) << "some guess of the first token was right, its drafts verified";
}

TEST(engine_compressed_first, a_lossy_request_decodes_over_the_fetched_view_as_generate_does) {
  vc::test::RedisServer server;
  VC_REQUIRE_REDIS(server);
  const auto model = vc::test::tinycode();
  for (const bool sampled : {false, true}) {
    server.restart();
    const Request req = long_request("lossy", "snapkv", sampled);
    Engine engine(config(server.url()));
    (void)run(engine, req);  // publishes the compressed chunks
    wait_for_chunks(server.url(), 4);
    const Result warm = run(engine, req);
    EXPECT_TRUE(warm.stats.remote_compressed_first) << warm.stats.remote_compressed_stop_reason;
    EXPECT_EQ(2u, warm.stats.remote_compressed_chunks_hit);
    EXPECT_EQ(0u, warm.stats.remote_bytes_fetched) << "lossy never reads the full chunks";
    EXPECT_EQ(0u, held_after_settling(engine));

    vc::GeneratorConfig gc;
    gc.max_context = 2048;
    gc.remote_url = server.url();
    gc.remote_chunk_tokens = kChunk;
    vc::Generator gen(model, vc::test::tinycode_tokenizer(), gc);
    vc::GenerateOptions o;
    o.mode = vc::DecodeMode::lossy;
    o.compressor = req.compressor;
    o.ratio = req.ratio;
    o.max_tokens = req.max_tokens;
    o.stop_at_eos = false;
    o.sampling = {req.temperature, req.top_k, req.top_p, req.seed};
    const vc::GenerateResult g = gen.generate(req.prompt_ids, o);
    EXPECT_TRUE(g.stats.remote_compressed_first);
    EXPECT_EQ(g.output_ids, warm.output_ids) << (sampled ? "seeded" : "greedy");
    EXPECT_EQ(g.output_logprobs, warm.output_logprobs);
  }
}

TEST(engine_compressed_first, the_full_flow_runs_when_compressed_first_is_off_or_no_compressed_chunk_is_cached) {
  vc::test::RedisServer server;
  VC_REQUIRE_REDIS(server);
  const Request req = long_request("vericache", "snapkv", false);
  EngineConfig off = config(server.url());
  off.remote_compressed_first = false;
  {
    Engine engine(off);
    (void)run(engine, req);
    wait_for_chunks(server.url(), 4);
    const Result r = run(engine, req);
    EXPECT_FALSE(r.stats.remote_compressed_first);
    EXPECT_EQ(0u, r.stats.remote_compressed_chunks_hit) << "the store was not asked";
    EXPECT_EQ(2u, r.stats.remote_chunks_hit);
  }
  // The same prompt under another ratio: its compressed chunks have other keys.
  Request other = req;
  other.ratio = 8;
  Engine engine(config(server.url()));
  const Result r = run(engine, other);
  EXPECT_FALSE(r.stats.remote_compressed_first);
  EXPECT_EQ(0u, r.stats.remote_compressed_chunks_hit);
  EXPECT_FALSE(r.stats.remote_compressed_stop_reason.empty());
  EXPECT_EQ(2u, r.stats.remote_chunks_hit) << "the full chunks serve any ratio";
}

TEST(engine_compressed_first, a_longer_prompt_drafts_over_the_cached_chunks_and_publishes_the_compressed_ones_it_lacked) {
  // The store holds a 300-token prompt's chunk (one of 256); the 650-token prompt
  // that starts with it fetches that compressed chunk, reserves its 394-position
  // suffix when the chunk arrives and drafts over it; once the full KV is in, its
  // view is rebuilt over the whole prompt and the compressed chunk the store lacked
  // is published, so its next run hits both. A suffix longer than
  // remote_compressed_suffix (by default one chunk) takes the full flow. Tokens
  // equal an engine without the store each time.
  vc::test::RedisServer server;
  VC_REQUIRE_REDIS(server);
  const Request longer = long_request("vericache", "snapkv", true);
  Request shorter = longer;
  shorter.prompt_ids.resize(300);
  Result local;
  {
    Engine plain(config());
    local = run(plain, longer);
  }
  for (const size_t limit : {size_t(2048), size_t(0)}) {
    server.restart();
    EngineConfig c = config(server.url());
    c.remote_compressed_suffix = limit;
    Engine engine(c);
    (void)run(engine, shorter);
    wait_for_chunks(server.url(), 2);  // its full and compressed chunk 0
    const Result first = run(engine, longer);
    expect_same_output(local, first, "first, limit " + std::to_string(limit));
    const auto& s = first.stats;
    if (limit == 0) {
      EXPECT_FALSE(s.remote_compressed_first) << "a 394-position suffix over the default of a chunk";
      EXPECT_NE(s.remote_compressed_stop_reason.find("leaves a suffix of 394 positions, over the 256 the "
                                                     "request may draft over: not fetched, full flow"),
                std::string::npos)
          << s.remote_compressed_stop_reason;
      EXPECT_EQ(0u, s.remote_bytes_compressed) << "counted in the store, not fetched";
      EXPECT_EQ(1u, s.remote_chunks_hit) << "the full flow's";
      continue;
    }
    ASSERT_TRUE(s.remote_compressed_first) << s.remote_compressed_stop_reason;
    EXPECT_EQ(1u, s.remote_compressed_chunks_hit);
    EXPECT_EQ(1u, s.remote_chunks_hit) << s.remote_stop_reason;
    EXPECT_EQ(1u, s.remote_chunks_published);
    EXPECT_EQ(1u, s.remote_compressed_chunks_published) << "chunk 1 of the rebuilt view";
    wait_for_chunks(server.url(), 4);
    const Result second = run(engine, longer);
    expect_same_output(local, second, "second");
    EXPECT_TRUE(second.stats.remote_compressed_first) << second.stats.remote_compressed_stop_reason;
    EXPECT_EQ(2u, second.stats.remote_compressed_chunks_hit);
    EXPECT_EQ(0u, second.stats.remote_compressed_chunks_published);
    EXPECT_EQ(0u, held_after_settling(engine));
  }
}

TEST(engine_compressed_first, requests_fetch_through_several_net_fetchers_at_once_or_one_in_segments) {
  vc::test::RedisServer server;
  VC_REQUIRE_REDIS(server);
  Request a = long_request("vericache", "snapkv", false);
  Request b = long_request("vericache", "snapkv", true);
  std::reverse(b.prompt_ids.begin() + 1, b.prompt_ids.end());  // another prompt
  Result want_a, want_b;
  {
    Engine plain(config());
    want_a = run(plain, a);
    want_b = run(plain, b);
  }
  for (const int fetchers : {1, 2}) {
    server.restart();
    EngineConfig c = config(server.url());
    c.remote_fetchers = fetchers;
    // One net_fetcher: each full chunk a fetch of its own, so the two requests'
    // fetches take turns on it; two: each prefix in one fetch.
    c.remote_fetch_segment = fetchers == 1 ? 1 : 0;
    Engine engine(c);
    (void)run(engine, a);
    (void)run(engine, b);
    wait_for_chunks(server.url(), 8);
    auto sa = engine.submit(a);  // both admitted at once: their fetches go out together
    auto sb = engine.submit(b);
    const Result ra = sa.result.get(), rb = sb.result.get();
    expect_same_output(want_a, ra, "a");
    expect_same_output(want_b, rb, "b");
    EXPECT_TRUE(ra.stats.remote_compressed_first && rb.stats.remote_compressed_first);
    for (const Result* r : {&ra, &rb}) {
      EXPECT_EQ(2u, r->stats.remote_chunks_hit) << r->stats.remote_stop_reason;
      EXPECT_EQ(fetchers == 1 ? 2u : 1u, r->stats.remote_fetch_segments);
    }
    const auto s = engine.stats();
    EXPECT_EQ(size_t(fetchers), s.remote_fetchers);
    EXPECT_EQ(size_t(fetchers), s.remote_fetchers_busy_peak)
        << "each net_fetcher took a request's fetch";
  }
  EngineConfig bad = config(server.url());
  bad.remote_fetchers = 0;
  vc::test::expect_error_naming([&] { Engine e(bad); },
                                "EngineConfig.remote_fetchers: must be at least 1, got 0");
}

TEST(engine_compressed_first, views_rebuilt_after_drafting_ahead_keep_the_tokens_of_full_decoding) {
  // A request that drafted ahead over a fetched view, then rebuilds it every 4
  // verified tokens from the full KV it fetched: each rebuild runs a layer per
  // slice after its commit. (A rebuild seldom falls due at a commit that keeps
  // drafts ahead: drafting ahead stops fold_every + L tokens past the prompt.)
  vc::test::RedisServer server;
  VC_REQUIRE_REDIS(server);
  Request req = long_request("vericache", "snapkv", false);
  req.max_tokens = 48;
  req.fold_every = 4;
  Result local;
  {
    Engine plain(config());
    local = run(plain, req);
  }
  {
    Engine engine(config(server.url()));
    (void)run(engine, req);
    wait_for_chunks(server.url(), 4);
  }
  vc::cli::ThrottledProxy slow("127.0.0.1", server.port(), kSlowLinkBytesPerSecond);
  EngineConfig sc = config(slow.url());
  sc.remote_timeout_ms = 60000;
  sc.trace = true;
  Engine engine(sc);
  auto sub = engine.submit(req);
  const Result r = sub.result.get();
  ASSERT_TRUE(r.ok) << r.error;
  expect_same_output(local, r, "rebuilding a fetched view");
  EXPECT_TRUE(r.stats.remote_compressed_first) << r.stats.remote_compressed_stop_reason;
  EXPECT_GT(r.stats.remote_predrafted, 6u) << "drafted ahead while the full chunks arrived";
  size_t fold_slices = 0;
  const nlohmann::json trace = vc::test::engine_trace(engine);  // a temporary's events would dangle
  for (const auto& e : trace["traceEvents"])
    fold_slices += vc::test::slice_of(e, "fold", sub.id);
  const size_t per_fold = size_t(vc::test::tinycode()->config().num_layers) + 1;  // SnapKV
  EXPECT_GE(fold_slices, 2 * per_fold) << "views rebuilt, a layer per slice";
  EXPECT_EQ(0u, held_after_settling(engine));
}

// An engine over the store that drafts over a fetched prefix followed by a long
// suffix (remote_compressed_suffix), tracing its slices.
EngineConfig long_suffix_config(const std::string& url) {
  EngineConfig c = config(url);
  c.remote_compressed_suffix = 4096;
  c.trace = true;
  return c;
}

// Runs `shorter` on `engine` and waits for its full and compressed chunk 0 in the store.
void store_short_prompt(Engine& engine, const std::string& url, const Request& shorter) {
  (void)run(engine, shorter);
  wait_for_chunks(url, 2);
}

// A 2,000-token prompt whose first 300 tokens are a prompt of their own.
Request long_suffix_request() {
  Request longer = long_request("vericache", "snapkv", false);
  std::mt19937 rng(29);
  const auto& cfg = vc::test::tinycode()->config();
  const auto more = vc::test::random_tokens(rng, 1400, cfg.vocab_size, cfg.bos_token_id);
  longer.prompt_ids.insert(longer.prompt_ids.end(), more.begin() + 1, more.end());  // no second BOS
  longer.prompt_ids.resize(2000);
  return longer;
}

TEST(engine_compressed_first, the_exact_prefill_of_a_long_suffix_runs_a_chunk_per_slice_between_other_requests_steps) {
  // The store holds a 300-token prompt's chunk; a 2,000-token prompt that starts
  // with it drafts over the fetched view, then the drafter prefills its 1,744
  // uncached positions exactly (finish_prefill) a chunk per slice, while a request
  // already decoding takes its steps between them. Both give the tokens of an
  // engine without the store.
  vc::test::RedisServer server;
  VC_REQUIRE_REDIS(server);
  const Request longer = long_suffix_request();
  Request shorter = longer;
  shorter.prompt_ids.resize(300);
  Request decoding = long_request("full", "snapkv", false);
  decoding.prompt_ids.resize(40);
  decoding.max_tokens = 1500;  // decoding still when the long one's exact prefill starts
  Result local_longer, local_decoding;
  {
    Engine plain(config());
    local_longer = run(plain, longer);
    local_decoding = run(plain, decoding);
  }
  Engine engine(long_suffix_config(server.url()));
  store_short_prompt(engine, server.url(), shorter);
  auto a = engine.submit(decoding);
  auto b = engine.submit(longer);
  const Result ra = a.result.get(), rb = b.result.get();
  ASSERT_TRUE(ra.ok) << ra.error;
  ASSERT_TRUE(rb.ok) << rb.error;
  expect_same_output(local_decoding, ra, "the decoding request");
  expect_same_output(local_longer, rb, "the long suffix's request");
  ASSERT_TRUE(rb.stats.remote_compressed_first) << rb.stats.remote_compressed_stop_reason;
  const auto w = vc::test::prefill_window(vc::test::engine_trace(engine), a.id, b.id, "exact prefill");
  EXPECT_GE(w.prefill_slices, (2000 - 256) / 256 + 1) << "a slice per chunk of the uncached suffix";
  EXPECT_GE(w.steps_inside, 2u) << "the decoding request's steps between them";
  EXPECT_EQ(0u, held_after_settling(engine));
}

TEST(engine_compressed_first, an_exact_prefill_interleaved_with_a_local_prefill_and_folds_keeps_every_requests_tokens) {
  // The drafter's sliced jobs share its workspace and its streamer into the full
  // tier: a compressed-first request's exact prefill, another vericache prompt's
  // local prefill (and then its view's rebuilds every 8 tokens), and a full-mode
  // request's steps all run between one another's slices. Each request's tokens
  // are those of an engine without the store.
  vc::test::RedisServer server;
  VC_REQUIRE_REDIS(server);
  const Request longer = long_suffix_request();
  Request shorter = longer;
  shorter.prompt_ids.resize(300);
  Request local_one = long_request("vericache", "h2o", false);  // no prefix in the store
  std::mt19937 rng(31);
  const auto& cfg = vc::test::tinycode()->config();
  local_one.prompt_ids = vc::test::random_tokens(rng, 1800, cfg.vocab_size, cfg.bos_token_id);
  local_one.max_tokens = 40;
  local_one.fold_every = 8;
  Request decoding = long_request("full", "snapkv", false);
  decoding.prompt_ids.resize(40);
  decoding.max_tokens = 600;
  const std::vector<Request> reqs{longer, local_one, decoding};
  std::vector<Result> want;
  {
    Engine plain(config());
    for (const Request& r : reqs) want.push_back(run(plain, r));
  }
  Engine engine(long_suffix_config(server.url()));
  store_short_prompt(engine, server.url(), shorter);
  std::vector<Engine::Submission> subs;
  for (const Request& r : reqs) subs.push_back(engine.submit(r));
  for (size_t i = 0; i < reqs.size(); ++i) {
    const Result r = subs[i].result.get();
    ASSERT_TRUE(r.ok) << r.error;
    expect_same_output(want[i], r, "request " + std::to_string(i));
  }
  EXPECT_EQ(0u, held_after_settling(engine));
  // They did interleave: the exact prefill's slices fall inside the span of the
  // local one's prefill and rebuilds.
  const nlohmann::json trace = vc::test::engine_trace(engine);  // a temporary's events would dangle
  double from = 1e300, to = -1e300;
  std::vector<double> exact;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    const double ts = e["ts"].get<double>();
    if (vc::test::slice_of(e, "prefill", subs[1].id) || vc::test::slice_of(e, "fold", subs[1].id)) {
      from = std::min(from, ts);
      to = std::max(to, ts + e["dur"].get<double>());
    }
    if (vc::test::slice_of(e, "exact prefill", subs[0].id)) exact.push_back(ts);
  }
  EXPECT_GE(exact.size(), 2u);
  EXPECT_TRUE(std::any_of(exact.begin(), exact.end(), [&](double t) { return t > from && t < to; }))
      << "the exact prefill ran outside the other prompt's prefill and rebuilds";
}

// Request `id`'s "exact prefill" slices in `engine`'s trace.
size_t exact_prefill_slices(Engine& engine, uint64_t id) {
  return vc::test::count_slices(vc::test::engine_trace(engine), "exact prefill", id);
}

TEST(engine_compressed_first, a_request_cancelled_during_its_sliced_exact_prefill_leaves_nothing_behind) {
  // Cancelled once its exact prefill has run a slice: the prefill stops between
  // two slices, nothing of the request is left (full tier, fast memory), and the
  // engine serves the same prompt next, to its end, with the tokens of an engine
  // without the store. A loaded machine may finish the prefill before the cancel
  // lands: of three tries, one must stop it part-way.
  vc::test::RedisServer server;
  VC_REQUIRE_REDIS(server);
  const Request longer = long_suffix_request();
  Request shorter = longer;
  shorter.prompt_ids.resize(300);
  Result local;
  {
    Engine plain(config());
    local = run(plain, longer);
  }
  size_t stopped_part_way = 0;
  for (int attempt = 0; attempt < 3 && stopped_part_way == 0; ++attempt) {
    server.restart();  // the store holds the short prompt's chunk alone
    Engine engine(long_suffix_config(server.url()));
    store_short_prompt(engine, server.url(), shorter);
    EXPECT_EQ(0u, held_after_settling(engine));
    const size_t staging = engine.stats().fast_memory_used;
    auto sub = engine.submit(longer);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (exact_prefill_slices(engine, sub.id) == 0 && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    engine.cancel(sub.id);
    const Result r = sub.result.get();
    EXPECT_TRUE(r.finish_reason == "cancelled" || r.ok) << r.error;
    EXPECT_EQ(0u, held_after_settling(engine));
    // The verifier's staging buffers stay charged between passes: what the short
    // prompt's run left, and no more.
    for (int i = 0; i < 5000 && engine.stats().fast_memory_used > staging; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    EXPECT_EQ(staging, engine.stats().fast_memory_used) << "the drafter holds nothing of it";
    const size_t cut = exact_prefill_slices(engine, sub.id);
    // The same prompt to its end: its slice count is a whole exact prefill's.
    auto again = engine.submit(longer);
    const Result ra = again.result.get();
    ASSERT_TRUE(ra.ok) << ra.error;
    expect_same_output(local, ra, "after the cancel");
    ASSERT_TRUE(ra.stats.remote_compressed_first) << ra.stats.remote_compressed_stop_reason;
    const size_t whole = exact_prefill_slices(engine, again.id);
    EXPECT_GE(cut, 1u);
    EXPECT_LE(cut, whole);
    if (r.finish_reason == "cancelled" && cut < whole) {
      ++stopped_part_way;
      EXPECT_TRUE(r.output_ids.empty()) << "no token before the exact first one";
    }
    EXPECT_EQ(0u, held_after_settling(engine));
  }
  EXPECT_EQ(1u, stopped_part_way) << "no cancel stopped an exact prefill part-way";
}

TEST(engine_compressed_first, a_request_cancelled_while_its_full_chunks_arrive_leaves_nothing_behind) {
  vc::test::RedisServer server;
  VC_REQUIRE_REDIS(server);
  const Request req = long_request("vericache", "snapkv", false);
  {
    Engine engine(config(server.url()));
    (void)run(engine, req);
    wait_for_chunks(server.url(), 4);
  }
  vc::cli::ThrottledProxy slow("127.0.0.1", server.port(), kSlowLinkBytesPerSecond);
  EngineConfig sc = config(slow.url());
  sc.remote_timeout_ms = 60000;
  Engine engine(sc);
  auto sub = engine.submit(req);
  std::this_thread::sleep_for(std::chrono::milliseconds(700));  // compressed in, full on its way
  engine.cancel(sub.id);
  const Result r = sub.result.get();
  EXPECT_EQ("cancelled", r.finish_reason) << r.error;
  EXPECT_TRUE(r.output_ids.empty()) << "no token before the exact first one";
  EXPECT_EQ(0u, held_after_settling(engine));
  // The engine goes on: the next request completes with the tokens of a local run.
  Result local;
  {
    Engine plain(config());
    local = run(plain, req);
  }
  const Result again = run(engine, req);
  expect_same_output(local, again, "after the cancel");
}

}  // namespace
