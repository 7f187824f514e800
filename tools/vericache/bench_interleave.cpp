// `vericache bench interleave`: what a long prompt's prefill does to the requests
// already decoding, with the drafter's prefill sliced into chunks
// (EngineConfig::slice_prefill) and whole, side by side in one run.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <future>
#include <iostream>
#include <mutex>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <vericache/engine.hpp>

#include "kernels/error.hpp"
#include "runtime/model/tokenizer.hpp"
#include "tools/vericache/bench_prompts.hpp"
#include "tools/vericache/bench_wait.hpp"
#include "tools/vericache/commands.hpp"
#include "tools/vericache/options.hpp"

namespace vc::cli {

namespace {

struct BenchInterleaveArgs {
  std::string model_dir = default_model_dir();
  size_t long_tokens = 8192;
  size_t decoding = 4;
  size_t prompt_tokens = 256;
  int gen_tokens = 256;
  std::string mode = "full";
  std::string draft = "16";
  int repeats = 3;
  int threads = 0;
  int tp = 1;
  size_t prefill_chunk = 256;
  bool json = false;
  std::string trace;  // --trace: the last sliced run's Chrome trace
};

using Clock = std::chrono::steady_clock;

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

struct Run {
  double long_first_token = 0;  // s from its submit
  double decode_tps_during = 0; // the decoding requests' tokens/s until then
  double longest_gap = 0;       // s between two tokens of one decoding request
  double total = 0;             // s until every request is done
};

// The decoding requests start; once each has its first token the long prompt is
// submitted; every token's time is noted.
Run run_once(const BenchInterleaveArgs& a, bool slice, const Tokenizer& tok) {
  vericache::EngineConfig ec;
  ec.model_dir = a.model_dir;
  ec.threads = a.threads;
  ec.tp = a.tp;
  ec.prefill_chunk = a.prefill_chunk;
  ec.slice_prefill = slice;
  ec.max_active = a.decoding + 1;
  ec.trace = !a.trace.empty();
  // The state the token callbacks write, declared before the engine: on an error
  // the engine (and its callbacks) goes first.
  std::mutex mu;
  std::vector<std::vector<Clock::time_point>> stamps(a.decoding);
  size_t started = 0;
  std::promise<void> all_started;
  Clock::time_point long_first{};
  vericache::Engine engine(ec);
  std::vector<vericache::Engine::Submission> subs;
  const auto t0 = Clock::now();
  for (size_t i = 0; i < a.decoding; ++i) {
    vericache::Request r;
    r.prompt_ids = code_prompt(tok, a.prompt_tokens, uint32_t(i + 1));
    r.max_tokens = a.gen_tokens;
    r.ignore_eos = true;
    r.mode = a.mode;
    r.draft = a.draft;
    subs.push_back(engine.submit(r, [&, i](uint64_t, int32_t) {
      std::lock_guard<std::mutex> lock(mu);
      stamps[i].push_back(Clock::now());
      if (stamps[i].size() == 1 && ++started == a.decoding) all_started.set_value();
    }));
  }
  std::future<void> started_f = all_started.get_future();
  await_first_token(started_f, std::span(subs), "bench interleave: the decoding requests", [&](size_t i) {
    std::lock_guard<std::mutex> lock(mu);
    return !stamps[i].empty();
  });
  vericache::Request l;
  l.prompt_ids = code_prompt(tok, a.long_tokens, 99);
  l.max_tokens = 4;
  l.ignore_eos = true;
  l.mode = "vericache";
  const auto long_submit = Clock::now();
  auto ls = engine.submit(l, [&](uint64_t, int32_t) {
    std::lock_guard<std::mutex> lock(mu);
    if (long_first == Clock::time_point{}) long_first = Clock::now();
  });
  for (auto& s : subs) {
    const auto r = s.result.get();
    if (!r.ok) throw vc::Error("bench interleave: a decoding request failed: " + r.error);
  }
  const auto lr = ls.result.get();
  if (!lr.ok) throw vc::Error("bench interleave: the long request failed: " + lr.error);
  Run out;
  out.total = seconds(Clock::now() - t0);
  if (!a.trace.empty() && slice) engine.write_trace(a.trace);
  std::lock_guard<std::mutex> lock(mu);
  out.long_first_token = seconds(long_first - long_submit);
  size_t during = 0;
  for (const auto& s : stamps) {
    for (size_t k = 1; k < s.size(); ++k) out.longest_gap = std::max(out.longest_gap, seconds(s[k] - s[k - 1]));
    during += size_t(std::count_if(s.begin(), s.end(), [&](Clock::time_point t) {
      return t > long_submit && t <= long_first;
    }));
  }
  out.decode_tps_during = out.long_first_token > 0 ? double(during) / out.long_first_token : 0;
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

int run_bench_interleave(const BenchInterleaveArgs& a) {
  const Tokenizer tok = Tokenizer::from_file(std::filesystem::path(a.model_dir) / "tokenizer.json");
  std::vector<Run> on, off;
  for (int k = 0; k < a.repeats; ++k) {  // alternating, so both see the machine's moods
    const bool first = k % 2 == 0;
    (first ? on : off).push_back(run_once(a, first, tok));
    (first ? off : on).push_back(run_once(a, !first, tok));
  }
  auto med = [](const std::vector<Run>& runs, double Run::*f) {
    std::vector<double> v;
    for (const Run& r : runs) v.push_back(r.*f);
    return median(v);
  };
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& [name, runs] : {std::pair{"sliced", &on}, std::pair{"whole", &off}})
    rows.push_back({{"prefill", name},
                    {"long_first_token_s", med(*runs, &Run::long_first_token)},
                    {"decode_tokens_per_s_during", med(*runs, &Run::decode_tps_during)},
                    {"longest_gap_s", med(*runs, &Run::longest_gap)},
                    {"total_s", med(*runs, &Run::total)}});
  if (a.json) {
    std::cout << nlohmann::json{{"model", a.model_dir},       {"long_tokens", a.long_tokens},
                                {"decoding", a.decoding},     {"prompt_tokens", a.prompt_tokens},
                                {"gen_tokens", a.gen_tokens}, {"mode", a.mode}, {"draft", a.draft},
                                {"repeats", a.repeats},       {"tp", a.tp}, {"prefill_chunk", a.prefill_chunk},
                                {"rows", rows}}
                     .dump(2)
              << "\n";
    return 0;
  }
  std::cout << fmt::format(
      "bench interleave: {}, {} {}-mode requests of {} prompt tokens decoding {} tokens each "
      "(draft {}); a {}-token vericache prompt arrives once each has its first token; tp {}; "
      "prefill chunks of {}; median of {}\n\n",
      a.model_dir, a.decoding, a.mode, a.prompt_tokens, a.gen_tokens, a.draft, a.long_tokens, a.tp,
      a.prefill_chunk, a.repeats);
  std::cout << fmt::format("{:<8} {:>18} {:>22} {:>13} {:>9}\n", "prefill", "long: first token",
                           "decoding while it runs", "longest gap", "all done");
  for (const auto& r : rows)
    std::cout << fmt::format("{:<8} {:>16.2f} s {:>16.1f} tok/s {:>11.3f} s {:>7.2f} s\n",
                             r["prefill"].get<std::string>(), r["long_first_token_s"].get<double>(),
                             r["decode_tokens_per_s_during"].get<double>(),
                             r["longest_gap_s"].get<double>(), r["total_s"].get<double>());
  std::cout << "\n(decoding while it runs: the decoding requests' tokens between the long "
               "prompt's submit and its first token, per second; longest gap: between two "
               "tokens of one decoding request)\n";
  return 0;
}

}  // namespace

void add_bench_interleave_command(CLI::App& bench, Runner& run) {
  auto a = std::make_shared<BenchInterleaveArgs>();
  CLI::App* cmd = bench.add_subcommand(
      "interleave", "Requests decoding while a long prompt is prefilled: sliced prefill against whole");
  cmd->add_option("--model", a->model_dir, "Model directory")->capture_default_str();
  cmd->add_option("--long", a->long_tokens, "Tokens of the long prompt")
      ->capture_default_str()->check(integer_in(1, 1 << 20));
  cmd->add_option("--decoding", a->decoding, "Requests decoding when it arrives")
      ->capture_default_str()->check(integer_in(1, 256));
  cmd->add_option("--prompt-tokens", a->prompt_tokens, "Prompt tokens of each decoding request")
      ->capture_default_str()->check(integer_in(16, 1 << 20));
  cmd->add_option("--gen-tokens", a->gen_tokens, "Tokens each decoding request generates")
      ->capture_default_str()->check(integer_in(2, 1 << 20));
  cmd->add_option("--mode", a->mode, "Mode of the decoding requests")
      ->capture_default_str()->check(CLI::IsMember({"full", "vericache", "lossy"}));
  cmd->add_option("--draft", a->draft,
                  "Draft length of the decoding requests (full mode: tokens per block, emitted together)")
      ->capture_default_str()->check(draft_value());
  cmd->add_option("--repeats", a->repeats, "Runs of each (median), alternating")
      ->capture_default_str()->check(integer_in(1, 100));
  add_prefill_chunk_option(*cmd, a->prefill_chunk);
  cmd->add_option("--tp", a->tp, "Tensor-parallel degree (CPU ranks)")
      ->check(integer_in(1, 64))
      ->capture_default_str();
  cmd->add_option("--threads", a->threads, "Threads per compute actor (0 = auto)")
      ->capture_default_str()->check(integer_in(0, 1024));
  cmd->add_option("--trace", a->trace, "Write the last sliced run's Chrome trace-event JSON here");
  cmd->add_flag("--json", a->json, "Print JSON");
  cmd->callback([&run, a] { run = [a] { return run_bench_interleave(*a); }; });
}

}  // namespace vc::cli
