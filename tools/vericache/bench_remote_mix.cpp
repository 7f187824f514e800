// `vericache bench remote-mix`: the remote prefix cache's recompute-front policies
// on a mixed load. --decoding requests with uncached prompts decode in the engine;
// once each has its first token, --cached requests whose prompts sit in the store
// arrive one after another (each when the one before has its first token). One row
// per policy of the full flow (compressed first off): fetch, then prefill (the
// plain flow; what `--remote-recompute-front-when-idle` takes beside others);
// recompute every front (EngineConfig::remote_recompute_front); priced
// (EngineConfig::remote_recompute_front_priced, deciding from the engine's own
// rates: the decoding requests' prefills give the prefill rate, the first plain
// fetch the link's, so the first cached request fetches). For each: the cached
// requests' time to first token, how many recomputed their front, the decoding
// requests' tokens per second while the cached ones are served (from the first's
// submit to the last one's end) and their longest gap. The store sits behind an
// in-process throttling proxy at --remote-bandwidth (by default 1.2/40 of the
// modelled local link). Every cached request's ids and logprobs are checked equal
// to full decoding, else the bench fails; the decoding requests are cancelled
// once the cached ones are done.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <future>
#include <iostream>
#include <memory>
#include <mutex>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <vericache/engine.hpp>

#include "kvtiers/compressor.hpp"
#include "kvtiers/remote/remote_tier.hpp"
#include "runtime/generator.hpp"
#include "tools/vericache/bench_median.hpp"
#include "tools/vericache/bench_prompts.hpp"
#include "tools/vericache/bench_wait.hpp"
#include "tools/vericache/commands.hpp"
#include "tools/vericache/options.hpp"
#include "tools/vericache/throttled_proxy.hpp"

namespace vc::cli {

namespace {

struct BenchRemoteMixArgs {
  std::string model_dir = default_model_dir();
  std::string remote;             // the store (redis://HOST:PORT); its vc:kv:* keys are cleared
  size_t decoding = 2;            // requests decoding when the cached ones arrive
  size_t prompt_tokens = 256;     // each decoding request's (uncached) prompt
  int gen_tokens = 4096;          // their limit; they are cancelled once the cached ones are done
  size_t cached = 3;              // requests with cached prompts, one after another
  size_t cached_tokens = 4096;    // each one's prompt, all of it in the store
  int max_tokens = 16;            // tokens each cached request generates
  std::string compressor = "snapkv";
  double ratio = 4;
  size_t draft = 8;
  size_t chunk = 256;
  double local_bandwidth = 400e6;  // bytes/s of the modelled full-tier link
  double remote_bandwidth = 0;     // 0: local_bandwidth * 1.2 / 40
  int repeats = 3;
  int threads = 0;
  uint32_t seed = 1;
  bool json = false;
};

using Clock = std::chrono::steady_clock;
double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

struct Policy {
  const char* name;
  bool front, priced;
};
constexpr Policy kPolicies[] = {{"fetch, then prefill", false, false},
                                {"recompute front", true, false},
                                {"priced", false, true}};

struct MixRun {
  std::vector<double> first_token;    // s from submit, per cached request
  std::vector<bool> recomputed;       // per cached request
  std::vector<std::string> price;     // per cached request (priced: the decision's line)
  double decode_tps_during = 0;       // the decoding requests' tokens/s from the first cached submit to the last one's end
  double longest_gap = 0;             // s between two tokens of one decoding request in that window
  double window = 0;                  // s of that window
};

vericache::Request request(const std::vector<int32_t>& prompt, int max_tokens, const BenchRemoteMixArgs& a) {
  vericache::Request q;
  q.prompt_ids = prompt;
  q.max_tokens = max_tokens;
  q.mode = "vericache";
  q.compressor = a.compressor;
  q.ratio = a.ratio;
  q.draft = std::to_string(a.draft);
  q.ignore_eos = true;
  return q;
}

MixRun run_once(const vericache::EngineConfig& ec, const BenchRemoteMixArgs& a, const Tokenizer& tok,
                const std::vector<std::vector<int32_t>>& cached, const std::vector<GenerateResult>& want,
                uint32_t decoding_seed) {
  // The state the token callbacks write, declared before the engine: on an error
  // the engine (and its callbacks) goes first.
  std::mutex mu;
  std::vector<std::vector<Clock::time_point>> stamps(a.decoding);
  size_t started = 0;
  std::promise<void> all_started;
  vericache::Engine engine(ec);
  std::vector<vericache::Engine::Submission> decoders;
  for (size_t i = 0; i < a.decoding; ++i) {
    // Seven tokens after the first cut out: a decoding prompt never starts as a
    // cached one does (those start at a prompt file's beginning), so it misses.
    std::vector<int32_t> prompt = code_prompt(tok, a.prompt_tokens + 7, decoding_seed + uint32_t(i));
    prompt.erase(prompt.begin() + 1, prompt.begin() + 8);
    decoders.push_back(engine.submit(
        request(prompt, a.gen_tokens, a),
        [&, i](uint64_t, int32_t) {
          std::lock_guard<std::mutex> lock(mu);
          stamps[i].push_back(Clock::now());
          if (stamps[i].size() == 1 && ++started == a.decoding) all_started.set_value();
        }));
  }
  if (a.decoding > 0) {
    std::future<void> started_f = all_started.get_future();
    await_first_token(started_f, std::span(decoders), "bench remote-mix: the decoding requests", [&](size_t i) {
      std::lock_guard<std::mutex> lock(mu);
      return !stamps[i].empty();
    });
  }

  MixRun out;
  const Clock::time_point window_start = Clock::now();
  std::vector<vericache::Engine::Submission> subs;
  for (size_t c = 0; c < cached.size(); ++c) {
    auto first = std::make_shared<std::promise<Clock::time_point>>();
    auto fired = std::make_shared<bool>(false);
    const Clock::time_point submitted = Clock::now();
    subs.push_back(engine.submit(request(cached[c], a.max_tokens, a), [first, fired](uint64_t, int32_t) {
      if (!*fired) {  // the scheduler's thread alone calls it
        *fired = true;
        first->set_value(Clock::now());
      }
    }));
    auto f = first->get_future();
    const Clock::time_point at = await_first_token(
        f, std::span(subs).last(1), "bench remote-mix: cached request " + std::to_string(c),
        [&](size_t) { return false; });
    out.first_token.push_back(seconds(at - submitted));
  }
  for (size_t c = 0; c < subs.size(); ++c) {
    const vericache::Result r = subs[c].result.get();
    if (!r.ok) throw Error("bench remote-mix: cached request " + std::to_string(c) + ": " + r.error);
    if (r.output_ids != want[c].output_ids || r.output_logprobs != want[c].output_logprobs)
      throw Error("bench remote-mix: cached request " + std::to_string(c) + " differs from full decoding");
    out.recomputed.push_back(r.stats.remote_recompute_front);
    out.price.push_back(r.stats.remote_front_price);
  }
  const Clock::time_point window_end = Clock::now();
  for (const auto& d : decoders) engine.cancel(d.id);
  for (size_t i = 0; i < decoders.size(); ++i) {
    const vericache::Result r = decoders[i].result.get();
    if (!r.ok) throw Error("bench remote-mix: decoding request " + std::to_string(i) + ": " + r.error);
    if (r.finish_reason != "cancelled")
      throw Error("bench remote-mix: decoding request " + std::to_string(i) + " ended (" + r.finish_reason +
                  ") before the cached requests did: raise --gen-tokens");
  }
  std::lock_guard<std::mutex> lock(mu);
  out.window = seconds(window_end - window_start);
  size_t during = 0;
  for (const auto& s : stamps) {
    Clock::time_point last = window_start;
    for (const Clock::time_point t : s) {
      if (t <= window_start || t > window_end) continue;
      ++during;
      out.longest_gap = std::max(out.longest_gap, seconds(t - last));
      last = t;
    }
    out.longest_gap = std::max(out.longest_gap, seconds(window_end - last));  // each was still running
  }
  out.decode_tps_during = out.window > 0 ? double(during) / out.window : 0;
  return out;
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / double(v.size());
}

int run_bench_remote_mix(const BenchRemoteMixArgs& a) {
  if (a.cached == 0) throw Error("bench remote-mix: --cached must be at least 1");
  (void)make_compressor(a.compressor);  // an unknown name fails before the store is touched
  auto model = Model::load(a.model_dir);
  auto tok = std::make_shared<const Tokenizer>(
      Tokenizer::from_file(std::filesystem::path(a.model_dir) / "tokenizer.json"));
  const size_t room = model->config().context_length();
  if (a.cached_tokens + size_t(a.max_tokens) > room)
    throw Error(fmt::format("bench remote-mix: --cached-tokens {} + --max-tokens {} exceeds the model's context "
                            "of {} tokens", a.cached_tokens, a.max_tokens, room));
  if (a.prompt_tokens + 7 + size_t(a.gen_tokens) > room)
    throw Error(fmt::format("bench remote-mix: --prompt-tokens {} + --gen-tokens {} exceeds the model's context "
                            "of {} tokens", a.prompt_tokens, a.gen_tokens, room));
  const RedisEndpoint ep = parse_redis_url(a.remote);
  const double remote_bw = a.remote_bandwidth > 0 ? a.remote_bandwidth : a.local_bandwidth * 1.2 / 40;
  ThrottledProxy proxy(ep.host, ep.port, remote_bw);

  // The cached prompts, their full-decoding outputs, and a publisher that puts
  // their chunks (full and compressed) into the store before each run.
  std::vector<std::vector<int32_t>> cached;
  for (size_t c = 0; c < a.cached; ++c)
    cached.push_back(code_prompt(*tok, a.cached_tokens, a.seed + 1000 + uint32_t(c)));
  GeneratorConfig gc;
  gc.threads = a.threads;
  gc.link_bandwidth = a.local_bandwidth;
  Generator reference(model, tok, gc);
  gc.remote_url = ep.url();
  gc.remote_chunk_tokens = a.chunk;
  Generator publisher(model, tok, gc);
  GenerateOptions opt;
  opt.max_tokens = a.max_tokens;
  opt.stop_at_eos = false;
  opt.compressor = a.compressor;
  opt.ratio = a.ratio;
  opt.draft_length = a.draft;
  std::vector<GenerateResult> want;
  for (const auto& p : cached) {
    opt.mode = DecodeMode::full;
    want.push_back(reference.generate(p, opt));
  }
  opt.mode = DecodeMode::vericache;

  vericache::EngineConfig ec;
  ec.model_dir = a.model_dir;
  ec.threads = a.threads;
  ec.max_active = a.decoding + a.cached;
  ec.link_bytes_per_second = a.local_bandwidth;
  ec.remote_url = proxy.url();
  ec.remote_chunk_tokens = a.chunk;
  ec.remote_timeout_ms = 600000;  // the throttled link is slow on purpose
  ec.remote_compressed_first = false;

  std::vector<std::vector<MixRun>> runs(std::size(kPolicies));
  for (int rep = 0; rep < a.repeats; ++rep) {
    for (size_t k = 0; k < std::size(kPolicies); ++k) {
      const size_t p = (k + size_t(rep)) % std::size(kPolicies);  // rotated, so each sees the machine's moods
      (void)remote_store_clear(ep);
      for (const auto& prompt : cached) (void)publisher.generate(prompt, opt);
      publisher.remote()->flush();
      vericache::EngineConfig e = ec;
      e.remote_recompute_front = kPolicies[p].front;
      e.remote_recompute_front_priced = kPolicies[p].priced;
      // The decoding prompts differ per run: none is in the store from a run before.
      runs[p].push_back(run_once(e, a, *tok, cached, want, a.seed + 100 * uint32_t(rep + 1)));
      const MixRun& r = runs[p].back();
      std::cerr << fmt::format("  {}: first tokens", kPolicies[p].name);
      for (size_t c = 0; c < r.first_token.size(); ++c)
        std::cerr << fmt::format(" {:.2f} s{}", r.first_token[c], r.recomputed[c] ? " (front)" : "");
      std::cerr << fmt::format("; decoding {:.1f} tok/s, longest gap {:.2f} s\n", r.decode_tps_during, r.longest_gap);
      for (const std::string& why : r.price)
        if (!why.empty()) std::cerr << "    " << why << "\n";
    }
  }

  nlohmann::json rows = nlohmann::json::array();
  for (size_t p = 0; p < std::size(kPolicies); ++p) {
    std::vector<double> ttft, tps, gap, window, recomputed;
    nlohmann::json per_run = nlohmann::json::array();
    for (const MixRun& r : runs[p]) {
      ttft.push_back(mean(r.first_token));
      tps.push_back(r.decode_tps_during);
      gap.push_back(r.longest_gap);
      window.push_back(r.window);
      recomputed.push_back(double(std::count(r.recomputed.begin(), r.recomputed.end(), true)));
      per_run.push_back({{"first_token_s", r.first_token}, {"recomputed_front", r.recomputed},
                         {"front_price", r.price}, {"decode_tokens_per_s_during", r.decode_tps_during},
                         {"longest_gap_s", r.longest_gap}, {"window_s", r.window}});
    }
    rows.push_back({{"policy", kPolicies[p].name},
                    {"first_token_mean_s_median", median(ttft)},
                    {"recomputed_front_median", median(recomputed)},
                    {"decode_tokens_per_s_during_median", median(tps)},
                    {"longest_gap_s_median", median(gap)},
                    {"window_s_median", median(window)},
                    {"runs", per_run}});
  }
  const std::string link = fmt::format(
      "store throttled by an in-process TCP proxy to {:.1f} MB/s; local full-tier link modelled at {:.1f} MB/s",
      remote_bw / 1e6, a.local_bandwidth / 1e6);
  if (a.json) {
    std::cout << nlohmann::json{{"model", a.model_dir},         {"decoding", a.decoding},
                                {"prompt_tokens", a.prompt_tokens}, {"cached", a.cached},
                                {"cached_tokens", a.cached_tokens}, {"max_tokens", a.max_tokens},
                                {"compressor", a.compressor},   {"ratio", a.ratio},
                                {"draft", a.draft},             {"chunk_tokens", a.chunk},
                                {"remote_bytes_per_second", remote_bw},
                                {"local_bytes_per_second", a.local_bandwidth},
                                {"repeats", a.repeats},         {"link", link},
                                {"rows", rows}}
                     .dump(2)
              << "\n";
    return 0;
  }
  std::cout << fmt::format(
      "bench remote-mix: {}; {} vericache requests of {} uncached prompt tokens decoding; {} requests "
      "of {} cached prompt tokens ({} tokens out each) arrive one after another; --compressor {} "
      "--ratio {} --draft {}, chunks of {}, compressed first off; {}; medians of {}, every cached "
      "request equal to --mode full\n\n",
      a.model_dir, a.decoding, a.prompt_tokens, a.cached, a.cached_tokens, a.max_tokens, a.compressor,
      a.ratio, a.draft, a.chunk, link, a.repeats);
  std::cout << fmt::format("{:<20} {:>18} {:>11} {:>20} {:>12} {:>9}\n", "policy", "cached: first token",
                           "recomputed", "decoding meanwhile", "longest gap", "window");
  for (const auto& r : rows)
    std::cout << fmt::format("{:<20} {:>16.2f} s {:>8.0f}/{:<2} {:>14.1f} tok/s {:>10.2f} s {:>7.2f} s\n",
                             r["policy"].get<std::string>(), r["first_token_mean_s_median"].get<double>(),
                             r["recomputed_front_median"].get<double>(), a.cached,
                             r["decode_tokens_per_s_during_median"].get<double>(),
                             r["longest_gap_s_median"].get<double>(), r["window_s_median"].get<double>());
  std::cout << "\n(cached: first token: the mean over the cached requests, from each one's submit; "
               "decoding meanwhile: the decoding requests' tokens from the first cached submit to the "
               "last cached request's end, per second; longest gap: between two of their tokens then)\n";
  return 0;
}

}  // namespace

void add_bench_remote_mix_command(CLI::App& bench, Runner& run) {
  auto a = std::make_shared<BenchRemoteMixArgs>();
  CLI::App* cmd = bench.add_subcommand(
      "remote-mix", "Remote prefix cache on a mixed load: the recompute-front policies while other "
                    "requests decode");
  cmd->add_option("--model", a->model_dir, "Model directory")->capture_default_str();
  cmd->add_option("--remote", a->remote, "The store, redis://HOST:PORT (its vc:kv:* keys are cleared)")
      ->required();
  cmd->add_option("--decoding", a->decoding, "Requests decoding when the cached ones arrive")
      ->capture_default_str()->check(integer_in(0, 256));
  cmd->add_option("--prompt-tokens", a->prompt_tokens, "Prompt tokens of each decoding request (uncached)")
      ->capture_default_str()->check(integer_in(16, 1 << 20));
  cmd->add_option("--gen-tokens", a->gen_tokens,
                  "Token limit of each decoding request (cancelled once the cached ones are done)")
      ->capture_default_str()->check(integer_in(2, 1 << 20));
  cmd->add_option("--cached", a->cached, "Requests with cached prompts, one after another")
      ->capture_default_str()->check(integer_in(1, 256));
  cmd->add_option("--cached-tokens", a->cached_tokens, "Prompt tokens of each cached request")
      ->capture_default_str()->check(integer_in(16, 1 << 20));
  cmd->add_option("--max-tokens", a->max_tokens, "Tokens each cached request generates")
      ->capture_default_str()->check(integer_in(1, 1 << 20));
  cmd->add_option("--compressor", a->compressor, "Compression method")->capture_default_str();
  cmd->add_option("--ratio", a->ratio, "Compression ratio")->capture_default_str()->check(number_in(1.0, 1000.0));
  cmd->add_option("--draft", a->draft, "Drafts per verification round")
      ->capture_default_str()->check(integer_in(1, 1024));
  cmd->add_option("--remote-chunk", a->chunk, "Tokens per remote chunk")
      ->capture_default_str()->check(integer_in(16, 1 << 20));
  cmd->add_option("--local-bandwidth", a->local_bandwidth,
                  "Bytes/s of the modelled full-tier link (0: not modelled, and the remote link unthrottled)")
      ->capture_default_str()->check(number_in(0.0, 1e15));
  cmd->add_option("--remote-bandwidth", a->remote_bandwidth,
                  "Bytes/s of the throttled remote link (0: local * 1.2 / 40)")
      ->capture_default_str()->check(number_in(0.0, 1e15));
  cmd->add_option("--repeats", a->repeats, "Runs of each policy (medians), rotated")
      ->capture_default_str()->check(integer_in(1, 100));
  cmd->add_option("--threads", a->threads, "Threads per compute actor (0 = auto)")
      ->capture_default_str()->check(integer_in(0, 1024));
  cmd->add_option("--seed", a->seed, "Picks the prompts")->capture_default_str()->check(integer_in(0, 4294967295LL));
  cmd->add_flag("--json", a->json, "Print JSON");
  cmd->callback([&run, a] { run = [a] { return run_bench_remote_mix(*a); }; });
}

}  // namespace vc::cli
