// `vericache bench acceptance`: accepted tokens per verification round and the
// acceptance rate of draft-and-verify decoding, per compressor, ratio and draft
// length, on code prompts; plus the end-to-end tokens/s of each draft length so the
// adaptive policy can be compared with the best static length on the same prompts.
// With --thresholds, each threshold's rows come with rows that select by ratio at
// the ratio the threshold achieved on each prompt: the two selections side by side
// at an equal achieved ratio.
#include <functional>
#include <iostream>
#include <limits>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "kvtiers/compressor.hpp"
#include "runtime/generator.hpp"
#include "runtime/request_validation.hpp"
#include "tools/vericache/bench_prompts.hpp"
#include "tools/vericache/commands.hpp"
#include "tools/vericache/options.hpp"
#include "tools/vericache/prompt_set.hpp"

namespace vc::cli {

namespace {

struct AcceptanceArgs {
  std::string model_dir = default_model_dir();
  std::string prompts = default_prompt_file();
  std::vector<std::string> compressors;  // empty: every registered method
  std::vector<double> ratios = {2, 4, 8};
  std::vector<double> thresholds;  // --thresholds: also select by threshold (and matched ratio)
  size_t keep_recent = 128;        // with a threshold: the recent window always kept
  bool ratios_given = false;       // --ratios on the command line (else none with --thresholds)
  std::vector<std::string> drafts = {"4", "8", "16", "30", "64", "auto"};
  size_t min_prompt_tokens = 256, max_prompt_tokens = 1000;
  int steps = 256;
  size_t fold_every = 0;  // 0: verified tokens keep exact KV (the published setting)
  std::vector<std::string> hierarchies = {"none"};  // draft hierarchies to compare
  RequestInput ngram;  // --ngram-min/max/proposal (its draft_hierarchy is unused)
  std::string prompt_kind = "plain";  // plain, or edit: the prompt repeats its context
  bool json = false;
};

int run_acceptance(const AcceptanceArgs& a) {
  if (a.min_prompt_tokens > a.max_prompt_tokens)
    throw Error(fmt::format("--min-prompt-tokens: {} is above --max-prompt-tokens ({})",
                            a.min_prompt_tokens, a.max_prompt_tokens));
  check_ngram_sizes(a.ngram);
  auto model = Model::load(a.model_dir);
  model->config().require_context(
      a.max_prompt_tokens + size_t(a.steps) + 16,
      fmt::format("--max-prompt-tokens: {} + --steps {} (+ 16)", a.max_prompt_tokens, a.steps));
  auto tok = std::make_shared<const Tokenizer>(
      Tokenizer::from_file(std::filesystem::path(a.model_dir) / "tokenizer.json"));
  std::vector<std::vector<int32_t>> prompts;
  for (const auto& p : load_prompts(a.prompts)) {
    auto ids = tok->encode(shape_prompt(p.text, a.prompt_kind));
    if (ids.size() >= a.min_prompt_tokens && ids.size() <= a.max_prompt_tokens)
      prompts.push_back(std::move(ids));
  }
  if (prompts.empty())
    throw Error(fmt::format("bench acceptance: no prompt of {}-{} tokens in {}",
                            a.min_prompt_tokens, a.max_prompt_tokens, a.prompts));
  const auto names = a.compressors.empty() ? compressor_names() : a.compressors;
  for (const auto& n : names) (void)make_compressor(n);
  GeneratorConfig gc;
  gc.max_context = a.max_prompt_tokens + size_t(a.steps) + 16;
  Generator gen(model, tok, gc);

  // Full-KV decoding of the same prompts: the reference speed (and output).
  double full_seconds = 0;
  size_t full_tokens = 0;
  std::vector<std::vector<int32_t>> reference;
  for (const auto& p : prompts) {
    GenerateOptions o;
    o.max_tokens = a.steps;
    o.stop_at_eos = false;
    const auto r = gen.generate(p, o);
    full_seconds += r.stats.decode_seconds;
    full_tokens += r.output_ids.size();
    reference.push_back(r.output_ids);
  }

  nlohmann::json rows = nlohmann::json::array();
  size_t mismatches = 0;
  // One row: every prompt under `select` (which sets prompt i's selection), with the
  // ratio each prompt's view achieved (full bytes / stored bytes) into `achieved`.
  auto run_row = [&](const std::string& name, const std::string& d, const std::string& h,
                     const std::string& selection, double ratio,
                     const std::function<void(size_t, GenerateOptions&)>& select,
                     std::vector<double>* achieved) {
    size_t rounds = 0, drafted = 0, accepted = 0, emitted = 0, stored = 0, full = 0;
    DraftLevelStats levels;
    double seconds = 0, draft_s = 0, verify_s = 0;
    for (size_t i = 0; i < prompts.size(); ++i) {
      GenerateOptions o;
      o.max_tokens = a.steps;
      o.stop_at_eos = false;
      o.mode = DecodeMode::vericache;
      o.compressor = name;
      if (ratio > 0) o.ratio = ratio;  // (threshold rows: the default, for budgets only)
      o.draft_auto = d == "auto";
      o.draft_length = o.draft_auto ? 0 : size_t(std::stoul(d));
      o.fold_every = a.fold_every;
      o.draft_hierarchy = parse_draft_hierarchy(h);
      o.ngram = NgramParams{size_t(a.ngram.ngram_min), size_t(a.ngram.ngram_max),
                            size_t(a.ngram.ngram_proposal)};
      select(i, o);
      const auto r = gen.generate(prompts[i], o);
      levels += r.stats.levels;
      mismatches += r.output_ids != reference[i];
      rounds += r.stats.rounds;
      drafted += r.stats.drafted;
      accepted += r.stats.accepted;
      emitted += r.output_ids.size() - 1;  // the first token comes from prefill
      seconds += r.stats.decode_seconds;
      draft_s += r.stats.draft_seconds;
      verify_s += r.stats.verify_seconds;
      stored += r.stats.compressed_bytes;
      full += r.stats.compressed_full_bytes;
      if (achieved != nullptr)
        achieved->push_back(r.stats.compressed_bytes > 0
                                ? double(r.stats.compressed_full_bytes) / double(r.stats.compressed_bytes)
                                : 1.0);
    }
    rows.push_back({{"compressor", name},
                    {"ratio", ratio},  // 0: not selected by a fixed ratio
                    {"selection", selection},
                    {"achieved_ratio", stored > 0 ? double(full) / double(stored) : 0.0},
                    {"draft", d},
                    {"draft_hierarchy", h},
                    {"rounds", rounds},
                    {"drafter_passes_per_round", double(levels.drafter_passes) / double(rounds)},
                    {"ngram_proposed", levels.ngram_proposed},
                    {"ngram_kept_by_drafter", levels.ngram_confirmed},
                    {"ngram_accepted_by_verifier", levels.ngram_accepted},
                    {"ngram_seconds", levels.ngram_seconds},
                    {"tokens_per_round", double(emitted) / double(rounds)},
                    {"accepted_per_round", double(accepted) / double(rounds)},
                    {"acceptance_rate", drafted ? double(accepted) / double(drafted) : 0.0},
                    {"tokens_per_second", double(emitted + prompts.size()) / seconds},
                    {"draft_seconds", draft_s},
                    {"verify_seconds", verify_s}});
    spdlog::info("{} {} L={} {}: {:.1f} tokens/round at {:.2f}x", name, selection, d, h,
                 rows.back()["tokens_per_round"].get<double>(),
                 rows.back()["achieved_ratio"].get<double>());
  };
  const std::vector<double> ratios =
      a.thresholds.empty() || a.ratios_given ? a.ratios : std::vector<double>{};
  for (const auto& name : names)
    for (const auto& d : a.drafts)
      for (const auto& h : a.hierarchies) {
        for (double ratio : ratios)
          run_row(name, d, h, fmt::format("ratio {:g}", ratio), ratio,
                  [](size_t, GenerateOptions&) {}, nullptr);
        for (double tau : a.thresholds) {
          std::vector<double> achieved;
          run_row(name, d, h, fmt::format("threshold {:g}", tau), 0,
                  [&](size_t, GenerateOptions& o) {
                    o.compressor_params.emplace_back("threshold", tau);
                    o.compressor_params.emplace_back("keep_recent", double(a.keep_recent));
                  },
                  &achieved);
          // The same prompts by ratio, each at the ratio its threshold view achieved.
          run_row(name, d, h, fmt::format("ratio as {:g}", tau), 0,
                  [&](size_t i, GenerateOptions& o) { o.ratio = std::max(1.0, achieved[i]); },
                  nullptr);
        }
      }

  const double full_tps = double(full_tokens) / full_seconds;
  if (a.json) {
    std::cout << nlohmann::json{{"prompts", prompts.size()},
                                {"prompt_kind", a.prompt_kind},
                                {"steps", a.steps},
                                {"full_kv_tokens_per_second", full_tps},
                                {"outputs_differing_from_full", mismatches},
                                {"rows", rows}}
                     .dump(2)
              << "\n";
    return mismatches == 0 ? 0 : 3;
  }
  std::cout << fmt::format(
      "bench acceptance: {} {} prompts of {}-{} tokens, {} greedy tokens each; full-KV decoding "
      "{:.0f} tokens/s on this CPU\n\n",
      prompts.size(), a.prompt_kind, a.min_prompt_tokens, a.max_prompt_tokens, a.steps, full_tps);
  std::cout << fmt::format("{:<26} {:<15} {:>8} {:>5} {:>6} {:>12} {:>14} {:>10} {:>13} {:>9} {:>9} {:>8}\n",
                           "compressor", "selection", "achieved", "L", "levels", "tokens/round",
                           "accepted/round", "accept %", "passes/round", "ngram acc", "tok/s", "vs full");
  for (const auto& r : rows)
    std::cout << fmt::format("{:<26} {:<15} {:>7.2f}x {:>5} {:>6} {:>12.2f} {:>14.2f} {:>9.1f}% {:>13.2f} {:>9} {:>9.0f} {:>7.2f}x\n",
                             r["compressor"].get<std::string>(), r["selection"].get<std::string>(),
                             r["achieved_ratio"].get<double>(),
                             r["draft"].get<std::string>(), r["draft_hierarchy"].get<std::string>(),
                             r["tokens_per_round"].get<double>(),
                             r["accepted_per_round"].get<double>(),
                             100 * r["acceptance_rate"].get<double>(),
                             r["drafter_passes_per_round"].get<double>(),
                             r["ngram_accepted_by_verifier"].get<size_t>(),
                             r["tokens_per_second"].get<double>(),
                             r["tokens_per_second"].get<double>() / full_tps);
  std::cout << fmt::format(
      "\ntokens/round: emitted per verification (accepted drafts + the verifier's token).\n"
      "achieved: full-precision bytes / stored bytes of the views, over all prompts; \"ratio as "
      "TAU\": by ratio, each prompt at the ratio threshold TAU achieved on it.\n"
      "levels: ngram = prompt lookup in front of the compressed-KV drafter; passes/round: the "
      "drafter's forward passes per round; ngram acc: n-gram proposals the verifier accepted.\n"
      "tok/s here is CPU-only with the full KV in host RAM: no slow link, so it says little "
      "about a GPU deployment (see bench throughput).\noutputs differing from full-KV "
      "decoding: {}\n",
      mismatches);
  return mismatches == 0 ? 0 : 3;
}

}  // namespace

void add_bench_acceptance_command(CLI::App& bench, Runner& run) {
  auto a = std::make_shared<AcceptanceArgs>();
  CLI::App* cmd = bench.add_subcommand("acceptance", "Accepted tokens per verification round");
  cmd->add_option("--model", a->model_dir, "Model directory")->capture_default_str();
  cmd->add_option("--prompts", a->prompts, "Golden JSON or JSONL prompt file")->capture_default_str();
  cmd->add_option("--compressor", a->compressors, "Methods to measure (default: all)");
  cmd->add_option("--ratios", a->ratios, "Compression ratios")->capture_default_str()
      ->check(number_in(1.0, kMaxRatio));
  cmd->add_option("--thresholds", a->thresholds,
                  "Also select by threshold TAU (token-dropping scorers), each beside rows by "
                  "ratio at the ratio it achieved per prompt; without --ratios, no fixed-ratio rows")
      ->check(number_in(-std::numeric_limits<double>::max()));
  cmd->add_option("--keep-recent", a->keep_recent,
                  "With --thresholds: the most recent positions always kept")
      ->capture_default_str()->check(integer_in(0, int64_t(1) << 30));
  cmd->add_option("--drafts", a->drafts, "Draft lengths (0..4096 or auto)")->capture_default_str()
      ->check(draft_value());
  cmd->add_option("--min-prompt-tokens", a->min_prompt_tokens)->capture_default_str()
      ->check(integer_in(1));
  cmd->add_option("--max-prompt-tokens", a->max_prompt_tokens)->capture_default_str()
      ->check(integer_in(1));
  cmd->add_option("--steps", a->steps, "Tokens generated per prompt")->capture_default_str()
      ->check(integer_in(1, 1 << 20));
  cmd->add_option("--fold-every", a->fold_every,
                  "Rebuild the view every N verified tokens (0 = keep them exact)")
      ->capture_default_str()->check(integer_in(0, int64_t(1) << 30));
  cmd->add_option("--hierarchies", a->hierarchies,
                  "Draft hierarchies to compare: none, ngram (e.g. --hierarchies none ngram)")
      ->capture_default_str()->check(CLI::IsMember({"none", "ngram"}));
  cmd->add_option("--ngram-min", a->ngram.ngram_min, "ngram: shortest context suffix matched")
      ->capture_default_str()->check(integer_in(1, kMaxNgram));
  cmd->add_option("--ngram-max", a->ngram.ngram_max, "ngram: longest context suffix matched")
      ->capture_default_str()->check(integer_in(1, kMaxNgram));
  cmd->add_option("--ngram-proposal", a->ngram.ngram_proposal,
                  "ngram: tokens proposed per drafter pass at most")
      ->capture_default_str()->check(integer_in(1, int64_t(kMaxDraftLength)));
  cmd->add_option("--prompt-kind", a->prompt_kind,
                  "plain: the prompt files as they are; edit: each file, then a request to "
                  "write it out again and its first lines (the answer repeats the context)")
      ->capture_default_str()->check(CLI::IsMember({"plain", "edit"}));
  cmd->add_flag("--json", a->json, "Print JSON");
  cmd->callback([&run, a, cmd] {
    a->ratios_given = cmd->count("--ratios") > 0;
    run = [a] { return run_acceptance(*a); };
  });
}

}  // namespace vc::cli
