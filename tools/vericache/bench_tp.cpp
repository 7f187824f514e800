// `vericache bench tp`: CPU tensor parallelism at several degrees, side by side: the
// same request (a prompt from a seed) in full and vericache mode on 1, 2, 4 ranks,
// prefill and decode speed (medians), ratios to degree 1, and whether each degree's
// vericache output equals its own full output bit for bit (the exactness contract
// at any degree). Ranks are threads sharing this machine's cores: --threads is the
// total, split between the ranks. With --link-gbps each rank's mover streams its
// own shard of the full KV over its own modelled link, so link bandwidth adds up.
#include <algorithm>
#include <cstring>
#include <iostream>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kernels/cpu/cpu_features.hpp"
#include "kernels/error.hpp"
#include "runtime/request_validation.hpp"
#include "runtime/tp_generator.hpp"
#include "tools/vericache/commands.hpp"
#include "tools/vericache/options.hpp"

namespace vc::cli {

namespace {

struct BenchTpArgs {
  std::string model_dir = default_model_dir();
  size_t context = 1024;
  int gen_tokens = 64;
  std::vector<int> degrees = {1, 2};
  std::string compressor = "snapkv";
  double ratio = 4.0;
  size_t draft = 16;
  int repeats = 3;
  int threads = 0;
  double link_gbps = 0;  // per rank: each rank's mover streams its shard over its own link
  uint64_t seed = 1;
  bool json = false;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

int run_bench_tp(const BenchTpArgs& a) {
  auto model = Model::load(a.model_dir);
  auto tok = std::make_shared<const Tokenizer>(
      Tokenizer::from_file(std::filesystem::path(a.model_dir) / "tokenizer.json"));
  const ModelConfig& c = model->config();
  c.require_context(a.context + size_t(a.gen_tokens),
                    fmt::format("--context: {} + --gen-tokens {}", a.context, a.gen_tokens));
  std::mt19937_64 rng(a.seed);
  std::uniform_int_distribution<int> pick(0, c.vocab_size - 3);
  std::vector<int32_t> prompt(a.context);
  for (auto& t : prompt) t = pick(rng);
  if (c.bos_token_id >= 0) prompt[0] = c.bos_token_id;
  const int total_threads = a.threads > 0 ? a.threads : default_thread_count();

  struct Row {
    std::string mode;
    int degree, threads;
    double prefill_s, decode_tps, verify_wait_s;
    size_t link_bytes;  // read from the full tiers, all ranks
    bool exact;  // vericache: equals full at the same degree; full: same ids as degree 1
    size_t rounds, accepted;
  };
  std::vector<Row> rows;
  std::vector<int32_t> ids_degree1;
  for (int d : a.degrees) {
    GeneratorConfig gc;
    gc.threads = std::max(1, total_threads / d);
    gc.max_context = a.context + size_t(a.gen_tokens) + 16;
    gc.link_bandwidth = a.link_gbps * 1e9;
    TpGenerator gen(model, tok, d, gc);
    GenerateResult full_out;
    for (const DecodeMode mode : {DecodeMode::full, DecodeMode::vericache}) {
      GenerateOptions o;
      o.mode = mode;
      o.max_tokens = a.gen_tokens;
      o.stop_at_eos = false;
      o.compressor = a.compressor;
      o.ratio = a.ratio;
      o.draft_length = a.draft;
      std::vector<double> pre, dec, wait;
      GenerateResult r;
      for (int i = 0; i < a.repeats; ++i) {
        r = gen.generate(prompt, o);
        pre.push_back(r.stats.prefill_seconds);
        dec.push_back(r.stats.decode_tokens_per_second());
        wait.push_back(r.stats.verify_wait_seconds);
      }
      Row row{decode_mode_name(mode), d, gc.threads, median(pre), median(dec), median(wait),
              r.stats.full_tier_bytes_read, false, r.stats.rounds, r.stats.accepted};
      if (mode == DecodeMode::full) {
        if (ids_degree1.empty()) ids_degree1 = r.output_ids;
        row.exact = r.output_ids == ids_degree1;
        full_out = r;
      } else {
        row.exact = r.output_ids == full_out.output_ids &&
                    r.output_logprobs.size() == full_out.output_logprobs.size() &&
                    std::memcmp(r.output_logprobs.data(), full_out.output_logprobs.data(),
                                r.output_logprobs.size() * sizeof(float)) == 0;
      }
      rows.push_back(row);
    }
  }
  auto base = [&](const Row& r) {
    for (const Row& b : rows)
      if (b.mode == r.mode && b.degree == a.degrees.front()) return b;
    return r;
  };
  if (a.json) {
    nlohmann::json j = nlohmann::json::array();
    for (const Row& r : rows) {
      const Row b = base(r);
      j.push_back({{"mode", r.mode}, {"degree", r.degree}, {"threads_per_rank", r.threads},
                   {"prefill_seconds", r.prefill_s}, {"decode_tokens_per_second", r.decode_tps},
                   {"decode_ratio_to_first_degree", b.decode_tps > 0 ? r.decode_tps / b.decode_tps : 0.0},
                   {"exact", r.exact}, {"rounds", r.rounds}, {"accepted", r.accepted},
                   {"verify_wait_seconds", r.verify_wait_s}, {"full_tier_bytes_read", r.link_bytes}});
    }
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::cout << fmt::format(
      "bench tp: {} ({} layers, {} heads, {} KV heads), prompt {} tokens (seed {}), {} tokens "
      "generated, vericache {} at {}x, draft {}; medians of {} runs; {} threads in all, {}; {}\n",
      a.model_dir, c.num_layers, c.num_heads, c.num_kv_heads, a.context, a.seed, a.gen_tokens,
      a.compressor, a.ratio, a.draft, a.repeats, total_threads,
      cpu::simd_path_name(cpu::active_simd_path()),
      a.link_gbps > 0 ? fmt::format("full tier behind a modelled {} GB/s link per rank", a.link_gbps)
                      : std::string("full tier in host memory, link not throttled"));
  std::cout << fmt::format("{:<10} {:>6} {:>8} {:>10} {:>10} {:>9} {:>8} {:>11} {:>10}  {}\n",
                           "mode", "degree", "threads", "prefill s", "decode t/s",
                           "x deg " + std::to_string(a.degrees.front()), "rounds", "link MB/rank",
                           "wait s", "exact");
  for (const Row& r : rows) {
    const Row b = base(r);
    const bool full = r.mode == "full";
    std::cout << fmt::format("{:<10} {:>6} {:>8} {:>10.3f} {:>10.1f} {:>8.2f}x {:>8} {:>11} {:>10}  {}\n",
                             r.mode, r.degree, r.threads, r.prefill_s, r.decode_tps,
                             b.decode_tps > 0 ? r.decode_tps / b.decode_tps : 0.0,
                             full ? std::string("-") : std::to_string(r.rounds),
                             full ? std::string("-") : fmt::format("{:.1f}", double(r.link_bytes) / 1e6 / r.degree),
                             full ? std::string("-") : fmt::format("{:.3f}", r.verify_wait_s),
                             r.mode == "full" ? (r.exact ? "ids = degree 1" : "ids differ from degree 1")
                                              : (r.exact ? "= full, bit for bit" : "DIFFERS FROM FULL"));
  }
  std::cout << "\nexact: vericache against full at the same degree (tokens and logprobs); full "
               "against degree 1 (token ids: the all-reduce order moves logits in the last bits)\n";
  for (const Row& r : rows)
    if (r.mode == "vericache" && !r.exact) return 2;
  return 0;
}

}  // namespace

void add_bench_tp_command(CLI::App& bench, Runner& run) {
  auto a = std::make_shared<BenchTpArgs>();
  CLI::App* cmd = bench.add_subcommand("tp", "CPU tensor parallelism at several degrees, side by side");
  cmd->add_option("--model", a->model_dir, "Model directory")->capture_default_str();
  cmd->add_option("--context", a->context, "Prompt tokens")->capture_default_str()
      ->check(integer_in(1, 1 << 22));
  cmd->add_option("--gen-tokens", a->gen_tokens, "Tokens per request")->capture_default_str()
      ->check(integer_in(2, 1 << 20));
  cmd->add_option("--degrees", a->degrees, "Tensor-parallel degrees (the first is the baseline)")
      ->capture_default_str()->check(integer_in(1, 64));
  cmd->add_option("--compressor", a->compressor)->capture_default_str();
  cmd->add_option("--ratio", a->ratio)->capture_default_str()->check(number_in(1.0, kMaxRatio));
  cmd->add_option("--draft", a->draft, "Drafts per round")->capture_default_str()
      ->check(integer_in(1, 4096));
  cmd->add_option("--repeats", a->repeats, "Runs per figure (median)")->capture_default_str()
      ->check(integer_in(1, 100));
  cmd->add_option("--threads", a->threads, "Threads in all, split between the ranks (0 = auto)")
      ->capture_default_str()->check(integer_in(0, 1024));
  cmd->add_option("--link-gbps", a->link_gbps,
                  "Modelled link to each rank's full tier, GB/s (0 = not throttled)")
      ->capture_default_str()->check(number_in(0.0, 1e6));
  cmd->add_option("--seed", a->seed, "Prompt seed")->capture_default_str()->check(seed_value());
  cmd->add_flag("--json", a->json, "Print JSON");
  cmd->callback([&run, a] { run = [a] { return run_bench_tp(*a); }; });
}

}  // namespace vc::cli
