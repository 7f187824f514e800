// `vericache bench remote`: time to first token and decode speed of a request whose
// prompt prefix sits in the remote store, three ways: (a) recompute (the store
// empty), (b) fetch the full chunks, then prefill the rest and compress locally,
// (c) compressed first (draft from the compressed chunks while the full chunks
// stream in, up to --remote-predraft tokens ahead; and with one round ahead only);
// (b) and (c) again through the actor engine (one request at a time: its
// net_fetcher, scheduler and drafter, the time to first token taken at the first
// token's callback), and (b) decoding with the full KV alone (draft 0: every token
// one pass over the whole full KV through the modelled local link, the published
// baseline; its view is still built, unused), and (b) recomputing the prefix's front
// while its back is fetched (generate and the engine). The store is reached through an in-process throttling TCP proxy at
// --remote-bandwidth, or with --remote-link direct as given (a link shaped outside the
// process: tools/shaped-redis.sh's tc on a veth pair); either way the bench measures the
// link's read rate first. The full tier's link is modelled at --local-bandwidth
// (GeneratorConfig::link_bandwidth). Every run's ids and logprobs are checked equal
// to full decoding (--mode full), else the bench fails. With --behind N, two more
// engine rows: the request submitted right after one of N cached tokens, into an
// engine with one net_fetcher, fetching each prefix whole or in segments of
// --fetch-segment chunks (EngineConfig::remote_fetch_segment; the time to first
// token is the later request's); and two more without compressed first: the full
// flow in segments, and recomputing each front while its back is fetched. With --extend E, three more: the engine's full
// first, compressed first (room for the suffix) and its default (compressed first
// for a suffix of up to a chunk) for the prompt and E more tokens, over the store
// holding the prompt's chunks alone (a prompt extending a cached one).
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>

#include <vericache/engine.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kernels/cpu/cpu_features.hpp"
#include "kvtiers/compressor.hpp"
#include "kvtiers/remote/redis_client.hpp"
#include "kvtiers/remote/remote_tier.hpp"
#include "runtime/generator.hpp"
#include "runtime/remote_prefix.hpp"
#include "tools/vericache/bench_median.hpp"
#include "tools/vericache/bench_prompts.hpp"
#include "tools/vericache/commands.hpp"
#include "tools/vericache/options.hpp"
#include "tools/vericache/throttled_proxy.hpp"

namespace vc::cli {

namespace {

struct BenchRemoteArgs {
  std::string model_dir = default_model_dir();
  std::string remote;  // the store (redis://HOST:PORT); the bench clears vc:kv:* in it
  std::vector<size_t> lengths = {1024, 2048, 4096};
  size_t chunk = 256;
  int max_tokens = 32;
  std::string compressor = "snapkv";
  double ratio = 4;
  size_t draft = 8;
  size_t fold_every = 64;  // GenerateOptions / Request fold_every (0 = never)
  double local_bandwidth = 400e6;  // bytes/s; the remote link gets 1.2/40 of it
  double remote_bandwidth = 0;     // 0: local_bandwidth * 1.2 / 40
  std::string remote_link = "proxy";  // proxy: throttled in process; direct: as given
  uint32_t seed = 1;
  int repeats = 1;  // runs per flow and length; the table shows medians
  int threads = 0;
  size_t predraft = 256;  // GeneratorConfig::remote_predraft of the compressed-first flow
  size_t behind = 0;      // the "behind" rows' earlier request (prompt tokens; 0: no such rows)
  size_t segment = 8;     // EngineConfig::remote_fetch_segment of the segmented "behind" row
  size_t extend = 0;      // the "on cached" rows: the prompt and this many more tokens (0: none)
  bool json = false;
};

struct FlowRun {
  std::string flow;
  size_t length = 0;
  GenerateStats stats;  // of the run with the median time to first token
  double ttft = 0, decode_tps = 0;  // medians over the repeats
};

vericache::Request engine_request(const std::vector<int32_t>& prompt, const BenchRemoteArgs& a) {
  vericache::Request q;
  q.prompt_ids = prompt;
  q.max_tokens = a.max_tokens;
  q.mode = "vericache";
  q.compressor = a.compressor;
  q.ratio = a.ratio;
  q.draft = std::to_string(a.draft);
  q.fold_every = a.fold_every;
  q.ignore_eos = true;
  return q;
}

// One vericache request through `engine`, as a GenerateResult (its ids, logprobs
// and the stats the table shows; first token and decode times from the callbacks).
// `behind`: submitted first, a request the measured one waits behind (its result
// is checked ok, not measured).
GenerateResult engine_run(vericache::Engine& engine, const std::vector<int32_t>& prompt,
                          const BenchRemoteArgs& a, const std::vector<int32_t>* behind = nullptr) {
  std::optional<vericache::Engine::Submission> earlier;
  if (behind != nullptr) earlier.emplace(engine.submit(engine_request(*behind, a)));
  const vericache::Request q = engine_request(prompt, a);
  using clock = std::chrono::steady_clock;
  std::vector<clock::time_point> at;  // written on the scheduler thread, read after get()
  const auto t0 = clock::now();
  vericache::Result r = engine.submit(q, [&at](uint64_t, int32_t) { at.push_back(clock::now()); })
                            .result.get();
  if (!r.ok) throw Error("bench remote: engine request: " + r.error);
  if (earlier) {
    const vericache::Result e = earlier->result.get();
    if (!e.ok) throw Error("bench remote: the earlier engine request: " + e.error);
  }
  GenerateResult g;
  g.output_ids = r.output_ids;
  g.output_logprobs = r.output_logprobs;
  GenerateStats& s = g.stats;
  auto secs = [](clock::time_point x, clock::time_point y) {
    return std::chrono::duration<double>(y - x).count();
  };
  s.output_tokens = r.output_ids.size();
  s.time_to_first_token_seconds = at.empty() ? 0 : secs(t0, at.front());
  s.decode_seconds = at.size() > 1 ? secs(at.front(), at.back()) : 0;
  s.prefill_seconds = r.stats.prefill_seconds;
  s.remote_chunks_hit = r.stats.remote_chunks_hit;
  s.remote_front_recomputed = r.stats.remote_front_recomputed;
  s.remote_compressed_chunks_hit = r.stats.remote_compressed_chunks_hit;
  s.remote_bytes_full = r.stats.remote_bytes_fetched;
  s.remote_bytes_compressed = r.stats.remote_bytes_compressed;
  s.remote_predrafted = r.stats.remote_predrafted;
  s.remote_predraft_rounds = r.stats.remote_predraft_rounds;
  s.rounds = r.stats.rounds;
  s.drafted = r.stats.drafted;
  s.remote_full_wait_seconds = r.stats.remote_full_wait_seconds;
  s.remote_compressed_first = r.stats.remote_compressed_first;
  return g;
}


// The read rate (bytes/s) of the link the runs use: a value of `bytes` written to the
// store directly, then read back through `link` (the proxy, or the store itself).
double measure_link(const RedisEndpoint& store, const RedisEndpoint& link, size_t bytes) {
  const RedisTimeouts slow{std::chrono::milliseconds(5000), std::chrono::milliseconds(600000)};
  const std::string key = "vc:bench:link-probe";
  RedisClient writer(store, slow, 1);
  (void)writer.command({"SET", key, std::string(bytes, 'x'), "EX", "600"});
  RedisClient reader(link, slow, 1);
  (void)reader.command({"PING"});  // connected before the clock starts
  const auto t0 = std::chrono::steady_clock::now();
  const RedisReply r = reader.command({"GET", key});
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  (void)writer.command({"DEL", key});
  if (r.str.size() != bytes) throw Error("bench remote: the link probe read back " +
                                         std::to_string(r.str.size()) + " bytes of " + std::to_string(bytes));
  return double(bytes) / dt;
}

int run_bench_remote(const BenchRemoteArgs& a) {
  (void)make_compressor(a.compressor);  // an unknown name fails before the store is touched
  auto model = Model::load(a.model_dir);
  auto tok = std::make_shared<const Tokenizer>(
      Tokenizer::from_file(std::filesystem::path(a.model_dir) / "tokenizer.json"));
  const size_t room = model->config().context_length();
  for (size_t n : a.lengths)
    if (n + size_t(a.max_tokens) + a.extend > room)
      throw Error(fmt::format("bench remote: --lengths {} + --max-tokens {}{} exceeds the model's context of {} "
                              "tokens", n, a.max_tokens, a.extend > 0 ? fmt::format(" + --extend {}", a.extend) : "",
                              room));
  const RedisEndpoint ep = parse_redis_url(a.remote);
  const bool direct = a.remote_link == "direct";
  const double remote_bw = a.remote_bandwidth > 0 ? a.remote_bandwidth : a.local_bandwidth * 1.2 / 40;
  std::unique_ptr<ThrottledProxy> proxy;
  if (!direct) proxy = std::make_unique<ThrottledProxy>(ep.host, ep.port, remote_bw);
  const std::string link_url = direct ? ep.url() : proxy->url();
  const double measured_bw = measure_link(ep, parse_redis_url(link_url), 4u << 20);

  GeneratorConfig gc;
  gc.threads = a.threads;
  gc.link_bandwidth = a.local_bandwidth;
  Generator reference(model, tok, gc);
  gc.remote_url = link_url;
  gc.remote_chunk_tokens = a.chunk;
  gc.remote_timeout_ms = 600000;  // the throttled link is slow on purpose
  gc.remote_compressed_first = false;
  Generator full_first(model, tok, gc);
  gc.remote_recompute_front = true;  // the chunks from the back, the prefix prefilled from the front
  Generator full_first_front(model, tok, gc);
  gc.remote_recompute_front = false;
  gc.remote_compressed_first = true;
  gc.remote_predraft = 0;  // one round's drafts ahead, as before remote_predraft
  Generator compressed_first_one_round(model, tok, gc);
  gc.remote_predraft = a.predraft;
  Generator compressed_first(model, tok, gc);
  vericache::EngineConfig ec;
  ec.model_dir = a.model_dir;
  ec.threads = a.threads;
  ec.max_active = 1;
  ec.link_bytes_per_second = a.local_bandwidth;
  ec.remote_url = link_url;
  ec.remote_chunk_tokens = a.chunk;
  ec.remote_timeout_ms = 600000;
  ec.remote_compressed_first = false;
  ec.remote_predraft = a.predraft;
  vericache::Engine engine_full_first(ec);
  ec.remote_recompute_front = true;
  vericache::Engine engine_full_first_front(ec);
  ec.remote_recompute_front = false;
  ec.remote_compressed_first = true;
  vericache::Engine engine_compressed_first(ec);
  // The --extend rows: the full flow alone; compressed first with room for the
  // suffix (it is shorter than E and a chunk); and the engine's default (compressed
  // first for a suffix of up to one chunk: with a longer one, the compressed chunks
  // are fetched, then the full flow runs).
  vericache::EngineConfig ec_full_first = ec, ec_compressed_first = ec, ec_default = ec;
  ec_full_first.remote_compressed_first = false;
  ec_compressed_first.remote_compressed_suffix = a.extend + a.chunk;
  // The "behind" rows: two requests at once, one net_fetcher.
  ec.max_active = 2;
  ec.remote_fetchers = 1;
  ec.remote_fetch_segment = 0;
  std::unique_ptr<vericache::Engine> engine_whole, engine_segments, engine_behind_full, engine_behind_front;
  if (a.behind > 0) {
    engine_whole = std::make_unique<vericache::Engine>(ec);
    ec.remote_fetch_segment = a.segment;
    engine_segments = std::make_unique<vericache::Engine>(ec);
    // The full flow behind the earlier request: fetched in segments, or the front
    // recomputed by the drafter (which the earlier request's front holds up too).
    ec.remote_compressed_first = false;
    engine_behind_full = std::make_unique<vericache::Engine>(ec);
    ec.remote_recompute_front = true;
    engine_behind_front = std::make_unique<vericache::Engine>(ec);
  }
  const std::vector<int32_t> earlier = a.behind > 0 ? code_prompt(*tok, a.behind, a.seed + 1)
                                                    : std::vector<int32_t>{};

  GenerateOptions opt;
  opt.max_tokens = a.max_tokens;
  opt.stop_at_eos = false;
  opt.mode = DecodeMode::full;
  std::vector<FlowRun> runs;
  for (size_t n : a.lengths) {
    const std::vector<int32_t> prompt = code_prompt(*tok, n, a.seed);
    opt.mode = DecodeMode::full;
    const GenerateResult ref = reference.generate(prompt, opt);
    opt.mode = DecodeMode::vericache;
    opt.compressor = a.compressor;
    opt.ratio = a.ratio;
    opt.draft_length = a.draft;
    opt.fold_every = a.fold_every;
    std::vector<std::string> names = {"recompute",         "full first",
                                      "compressed first",  "compressed first 1 round",
                                      "engine full first", "engine compressed first",
                                      "full first, full decode", "full first, recompute front",
                                      "engine full first, front"};
    std::vector<size_t> lengths(names.size(), n);
    auto add_flow = [&](std::string name, size_t length) {
      names.push_back(std::move(name));
      lengths.push_back(length);
      return int(names.size()) - 1;
    };
    const int behind_whole = a.behind > 0 ? add_flow(fmt::format("behind {}, whole fetch", a.behind), n) : -1;
    const int behind_segments =
        a.behind > 0 ? add_flow(fmt::format("behind {}, segments of {}", a.behind, a.segment), n) : -1;
    const int behind_full = a.behind > 0 ? add_flow(fmt::format("behind {}, full first", a.behind), n) : -1;
    const int behind_front = a.behind > 0 ? add_flow(fmt::format("behind {}, front", a.behind), n) : -1;
    // --extend: the prompt and E more tokens, over the store holding the prompt's chunks.
    const std::vector<int32_t> extended = a.extend > 0 ? code_prompt(*tok, n + a.extend, a.seed)
                                                       : std::vector<int32_t>{};
    const int extend_full = a.extend > 0 ? add_flow(fmt::format("on cached {}, full first", n), n + a.extend) : -1;
    const int extend_compressed =
        a.extend > 0 ? add_flow(fmt::format("on cached {}, compressed", n), n + a.extend) : -1;
    const int extend_default =
        a.extend > 0 ? add_flow(fmt::format("on cached {}, default", n), n + a.extend) : -1;
    std::vector<std::vector<GenerateStats>> got(names.size());
    const bool full_chunks_expected =
        remote_prefix_limit(*make_compressor(a.compressor), n, opt.stats_window) >= a.chunk;
    GenerateResult ref_extended;
    if (a.extend > 0) {
      GenerateOptions full_opt = opt;
      full_opt.mode = DecodeMode::full;
      ref_extended = reference.generate(extended, full_opt);
    }
    // Full-KV decoding over the fetched prefix (the published baseline): draft 0, so
    // every token is one pass over the whole full KV through the local link.
    GenerateOptions full_decode = opt;
    full_decode.draft_length = 0;
    auto check = [&](const GenerateResult& r, int flow) {
      const GenerateResult& want = lengths[size_t(flow)] == n ? ref : ref_extended;
      if (r.output_ids != want.output_ids || r.output_logprobs != want.output_logprobs)
        throw Error("bench remote: " + names[size_t(flow)] + " at " + std::to_string(lengths[size_t(flow)]) +
                    " tokens differs from full decoding");
      // The full flows must have found the prompt's chunks in the store when at least
      // one chunk lies below what they may take (remote_prefix_limit: not KVzap's,
      // not a scorer's statistics window): with none (the store stopped answering, or
      // evicted them) the row would time a recompute under the flow's name.
      const bool reads_full = flow == 1 || flow == 4 || flow == 6;
      if (reads_full && full_chunks_expected && r.stats.remote_chunks_hit == 0)
        throw Error("bench remote: " + names[size_t(flow)] + " at " + std::to_string(n) +
                    " tokens found none of the prompt's chunks in the store (did it stop answering, or "
                    "evict them?)");
      got[size_t(flow)].push_back(r.stats);
      std::cerr << fmt::format("  {} tokens, {}: first token {:.2f} s, {:.1f} tok/s\n", lengths[size_t(flow)],
                               names[size_t(flow)], r.stats.time_to_first_token_seconds,
                               r.stats.decode_tokens_per_second());
    };
    for (int rep = 0; rep < a.repeats; ++rep) {
      (void)remote_store_clear(ep);
      check(full_first.generate(prompt, opt), 0);  // a miss: prefills, publishes
      full_first.remote()->flush();
      check(full_first.generate(prompt, opt), 1);
      check(compressed_first.generate(prompt, opt), 2);
      check(compressed_first_one_round.generate(prompt, opt), 3);
      check(engine_run(engine_full_first, prompt, a), 4);
      check(engine_run(engine_compressed_first, prompt, a), 5);
      check(full_first.generate(prompt, full_decode), 6);
      check(full_first_front.generate(prompt, opt), 7);
      check(engine_run(engine_full_first_front, prompt, a), 8);
      if (a.behind > 0) {
        (void)full_first.generate(earlier, opt);  // publishes the earlier prompt's chunks
        full_first.remote()->flush();
        check(engine_run(*engine_whole, prompt, a, &earlier), behind_whole);
        check(engine_run(*engine_segments, prompt, a, &earlier), behind_segments);
        check(engine_run(*engine_behind_full, prompt, a, &earlier), behind_full);
        check(engine_run(*engine_behind_front, prompt, a, &earlier), behind_front);
      }
      if (a.extend > 0) {  // the store holds the prompt's chunks alone before each
        for (const auto& [config, flow] : {std::pair{&ec_full_first, extend_full},
                                           std::pair{&ec_compressed_first, extend_compressed},
                                           std::pair{&ec_default, extend_default}}) {
          (void)remote_store_clear(ep);
          (void)full_first.generate(prompt, opt);
          full_first.remote()->flush();
          // An engine of its own: its publishes are write-behind, and closing it
          // sends them, before the next row clears the store.
          GenerateResult r;
          {
            vericache::Engine e(*config);
            r = engine_run(e, extended, a);
          }
          check(r, flow);
        }
      }
    }
    for (size_t f = 0; f < names.size(); ++f) {
      std::vector<double> ttft, tps;
      for (const GenerateStats& st : got[size_t(f)]) {
        ttft.push_back(st.time_to_first_token_seconds);
        tps.push_back(st.decode_tokens_per_second());
      }
      FlowRun fr{names[f], lengths[f], got[f][0], median(ttft), median(tps)};
      for (const GenerateStats& st : got[size_t(f)])
        if (st.time_to_first_token_seconds == fr.ttft) fr.stats = st;
      runs.push_back(fr);
    }
  }

  nlohmann::json rows = nlohmann::json::array();
  for (const FlowRun& r : runs)
    rows.push_back({{"prompt_tokens", r.length},
                    {"flow", r.flow},
                    {"time_to_first_token_seconds_median", r.ttft},
                    {"decode_tokens_per_second_median", r.decode_tps},
                    {"prefill_seconds", r.stats.prefill_seconds},
                    {"full_chunks_hit", r.stats.remote_chunks_hit},
                    {"front_recomputed", r.stats.remote_front_recomputed},
                    {"compressed_chunks_hit", r.stats.remote_compressed_chunks_hit},
                    {"bytes_full", r.stats.remote_bytes_full},
                    {"bytes_compressed", r.stats.remote_bytes_compressed},
                    {"full_wait_seconds", r.stats.remote_full_wait_seconds},
                    {"predrafted", r.stats.remote_predrafted},
                    {"predraft_rounds", r.stats.remote_predraft_rounds},
                    {"rounds", r.stats.rounds},
                    {"drafted", r.stats.drafted},
                    {"compressed_first", r.stats.remote_compressed_first}});
  const std::string how =
      direct ? fmt::format("reached directly at {} (not throttled by the bench; shaped outside the process, "
                           "if at all)", ep.url())
             : fmt::format("throttled by an in-process TCP proxy to {:.1f} MB/s", remote_bw / 1e6);
  const std::string link = fmt::format(
      "remote link: {}, reads measured at {:.1f} MB/s (a 4 MiB value); local full-tier link modelled at "
      "{:.1f} MB/s (remote : local = 1.2 : {:.1f}, from the measured rate)",
      how, measured_bw / 1e6, a.local_bandwidth / 1e6, 1.2 * a.local_bandwidth / measured_bw);
  if (a.json) {
    std::cout << nlohmann::json{{"model", a.model_dir},
                                {"compressor", a.compressor},
                                {"ratio", a.ratio},
                                {"draft", a.draft},
                                {"fold_every", a.fold_every},
                                {"max_tokens", a.max_tokens},
                                {"predraft", a.predraft},
                                {"chunk_tokens", a.chunk},
                                {"remote_link", a.remote_link},
                                {"remote_bytes_per_second", direct ? 0.0 : remote_bw},
                                {"remote_measured_bytes_per_second", measured_bw},
                                {"local_bytes_per_second", a.local_bandwidth},
                                {"link", link},
                                {"simd", std::string(cpu::simd_path_name(cpu::active_simd_path()))},
                                {"runs", rows}}
                     .dump(2)
              << "\n";
    return 0;
  }
  std::cout << fmt::format(
      "bench remote: {}, --mode vericache --compressor {} --ratio {} --draft {} --fold-every {}, {} "
      "tokens out, chunks of {}, --remote-predraft {}; every run equal to --mode full; medians of {} "
      "(first token, decode; the other columns from the median run)\n{}\n\n",
      a.model_dir, a.compressor, a.ratio, a.draft, a.fold_every, a.max_tokens, a.chunk, a.predraft,
      a.repeats, link);
  std::cout << fmt::format("{:>7} {:<28} {:>12} {:>9} {:>10} {:>11} {:>10} {:>13} {:>6}\n", "prompt",
                           "flow", "first token", "decode", "prefill", "fetched", "full wait",
                           "ahead/rounds", "front");
  for (const FlowRun& r : runs)
    std::cout << fmt::format(
        "{:>7} {:<28} {:>10.2f} s {:>5.1f} t/s {:>8.2f} s {:>8.2f} MB {:>8.2f} s {:>8}/{:<4} {:>6}\n",
        r.length, r.flow, r.ttft, r.decode_tps, r.stats.prefill_seconds,
        double(r.stats.remote_bytes_full + r.stats.remote_bytes_compressed) / 1e6,
        r.stats.remote_full_wait_seconds, r.stats.remote_predrafted, r.stats.remote_predraft_rounds,
        r.stats.remote_front_recomputed);
  return 0;
}

}  // namespace

void add_bench_remote_command(CLI::App& bench, Runner& run) {
  auto a = std::make_shared<BenchRemoteArgs>();
  CLI::App* cmd = bench.add_subcommand(
      "remote", "Remote prefix cache: recompute vs full-first vs compressed-first, generate and the "
                "engine (throttled or shaped link)");
  cmd->add_option("--model", a->model_dir, "Model directory")->capture_default_str();
  cmd->add_option("--remote", a->remote, "The store, redis://HOST:PORT (its vc:kv:* keys are cleared)")
      ->required();
  cmd->add_option("--lengths", a->lengths, "Prompt lengths in tokens")
      ->capture_default_str()->check(integer_in(2, 1 << 20));
  cmd->add_option("--remote-chunk", a->chunk, "Tokens per remote chunk")
      ->capture_default_str()->check(integer_in(16, 1 << 20));
  cmd->add_option("--max-tokens", a->max_tokens, "Tokens generated per run")
      ->capture_default_str()->check(integer_in(1, 1 << 20));
  cmd->add_option("--compressor", a->compressor, "Compression method")->capture_default_str();
  cmd->add_option("--ratio", a->ratio, "Compression ratio")->capture_default_str()->check(number_in(1.0, 1000.0));
  cmd->add_option("--draft", a->draft, "Drafts per verification round")
      ->capture_default_str()->check(integer_in(1, 1024));
  cmd->add_option("--fold-every", a->fold_every, "Rebuild the view every N verified tokens (0 = never)")
      ->capture_default_str()->check(integer_in(0, 1 << 20));
  cmd->add_option("--local-bandwidth", a->local_bandwidth,
                  "Bytes/s of the modelled full-tier link (0: not modelled, and the remote link unthrottled)")
      ->capture_default_str()->check(number_in(0.0, 1e15));
  cmd->add_option("--remote-bandwidth", a->remote_bandwidth,
                  "Bytes/s of the throttled remote link (0: local * 1.2 / 40; proxy only)")->capture_default_str()
      ->check(number_in(0.0, 1e15));
  cmd->add_option("--remote-link", a->remote_link,
                  "proxy: through an in-process throttling proxy at --remote-bandwidth; direct: to "
                  "--remote as given (shaped outside, e.g. tools/shaped-redis.sh)")
      ->capture_default_str()->check(CLI::IsMember({"proxy", "direct"}));
  cmd->add_option("--seed", a->seed, "Picks the first prompt of the prompt set")->capture_default_str();
  cmd->add_option("--repeats", a->repeats, "Runs per flow and length (medians)")
      ->capture_default_str()->check(integer_in(1, 1000));
  cmd->add_option("--threads", a->threads, "Threads (0 = auto)")
      ->capture_default_str()->check(integer_in(0, 1024));
  cmd->add_option("--remote-predraft", a->predraft,
                  "Compressed first (generate's and the engine's): draft up to N tokens ahead "
                  "while the full chunks arrive (the \"1 round\" row: one round's)")
      ->capture_default_str()->check(integer_in(0, 1 << 20));
  cmd->add_option("--behind", a->behind,
                  "Two more engine rows: each request submitted right after one of N cached tokens "
                  "(one net_fetcher), fetching prefixes whole or in --fetch-segment chunks (0: none)")
      ->capture_default_str()->check(integer_in(0, 1 << 20));
  cmd->add_option("--fetch-segment", a->segment, "Chunks per fetch of the segmented \"behind\" row")
      ->capture_default_str()->check(integer_in(1, 1 << 20));
  cmd->add_option("--extend", a->extend,
                  "Three more engine rows: each prompt and N more tokens, over the store holding "
                  "the prompt's chunks alone: full first, compressed first, the default (0: none)")
      ->capture_default_str()->check(integer_in(0, 1 << 20));
  cmd->add_flag("--json", a->json, "Print JSON");
  cmd->callback([&run, a] { run = [a] { return run_bench_remote(*a); }; });
}

}  // namespace vc::cli
