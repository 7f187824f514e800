// `vericache bench divergence`: how far lossy decoding (over the compressed KV
// alone) drifts from full-KV decoding, per compressor and ratio, on a prompt set.
// Both runs see the same context at every step (the lossy run is teacher-forced
// with the full run's greedy tokens), so per-step KL(full || lossy) compares like
// with like; the first step whose argmax differs is where free-running greedy
// decoding would first diverge.
#include <cmath>
#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "kvtiers/compressor.hpp"
#include "runtime/generator.hpp"
#include "runtime/sampler.hpp"
#include "runtime/request_validation.hpp"
#include "tools/vericache/commands.hpp"
#include "tools/vericache/options.hpp"
#include "tools/vericache/prompt_set.hpp"

namespace vc::cli {

namespace {

struct DivergenceArgs {
  std::string model_dir = default_model_dir();
  std::string prompts = default_prompt_file();
  std::vector<std::string> compressors;  // empty: every registered method
  std::vector<double> ratios = {2, 4, 8};
  int steps = 256;
  size_t max_prompts = 0;  // 0: all
  bool json = false;
};

// KL(p || q) in nats for logits a (p) and b (q).
double kl(const float* a, const float* b, size_t n) {
  double ma = -INFINITY, mb = -INFINITY;
  for (size_t i = 0; i < n; ++i) {
    ma = std::max(ma, double(a[i]));
    mb = std::max(mb, double(b[i]));
  }
  double za = 0, zb = 0;
  for (size_t i = 0; i < n; ++i) {
    za += std::exp(double(a[i]) - ma);
    zb += std::exp(double(b[i]) - mb);
  }
  const double la = ma + std::log(za), lb = mb + std::log(zb);
  double k = 0;
  for (size_t i = 0; i < n; ++i) {
    const double lpa = double(a[i]) - la;
    k += std::exp(lpa) * (lpa - (double(b[i]) - lb));
  }
  return std::max(0.0, k);
}

int run_divergence(const DivergenceArgs& a) {
  auto model = Model::load(a.model_dir);
  auto tok = std::make_shared<const Tokenizer>(
      Tokenizer::from_file(std::filesystem::path(a.model_dir) / "tokenizer.json"));
  auto prompts = load_prompts(a.prompts);
  if (a.max_prompts > 0 && prompts.size() > a.max_prompts) prompts.resize(a.max_prompts);
  const auto names = a.compressors.empty() ? compressor_names() : a.compressors;
  for (const auto& n : names) (void)make_compressor(n);  // unknown names fail first
  GeneratorConfig gc;
  gc.max_context = 4096;
  for (const auto& p : prompts)
    if (const size_t n = tok->encode(p.text).size(); n + size_t(a.steps) > gc.max_context)
      throw Error(fmt::format("--steps: prompt '{}' ({} tokens) + {} steps exceeds the bench's "
                              "context of {} tokens",
                              p.name, n, a.steps, gc.max_context));
  Generator gen(model, tok, gc);
  const size_t V = size_t(model->config().vocab_size);

  // The reference: full-KV greedy tokens and logits per prompt.
  struct Ref {
    std::vector<int32_t> ids, out;
    std::vector<float> logits;
  };
  std::vector<Ref> refs;
  for (const auto& p : prompts) {
    GenerateOptions o;
    o.max_tokens = a.steps;
    o.stop_at_eos = false;
    o.keep_logits = true;
    auto r = gen.generate(p.text, o);
    refs.push_back({r.prompt_ids, r.output_ids, std::move(r.step_logits)});
  }

  nlohmann::json rows = nlohmann::json::array();
  for (const auto& name : names)
    for (double ratio : a.ratios) {
      double kl_sum = 0, agree = 0, first_sum = 0, bytes_ratio = 0;
      size_t steps_total = 0;
      std::vector<double> kl_at(3, 0.0);
      std::vector<size_t> kl_at_n(3, 0);
      const size_t marks[3] = {64, 128, 256};
      for (const auto& ref : refs) {
        GenerateOptions o;
        o.mode = DecodeMode::lossy;
        o.compressor = name;
        o.ratio = ratio;
        o.forced_output = ref.out;
        o.stop_at_eos = false;
        o.keep_logits = true;
        const auto r = gen.generate(ref.ids, o);
        size_t first = ref.out.size();
        for (size_t i = 0; i < ref.out.size(); ++i) {
          const float* f = &ref.logits[i * V];
          const float* l = &r.step_logits[i * V];
          const double k = kl(f, l, V);
          kl_sum += k;
          for (int m = 0; m < 3; ++m)
            if (i + 1 == marks[m]) {
              kl_at[size_t(m)] += k;
              ++kl_at_n[size_t(m)];
            }
          const bool same = argmax({l, V}) == ref.out[i];
          agree += same;
          if (!same && first == ref.out.size()) first = i;
        }
        steps_total += ref.out.size();
        first_sum += double(first);
        bytes_ratio += double(r.stats.compressed_full_bytes) / double(r.stats.compressed_bytes);
      }
      nlohmann::json row = {{"compressor", name},
                            {"ratio", ratio},
                            {"achieved_ratio", bytes_ratio / double(refs.size())},
                            {"kl_mean", kl_sum / double(steps_total)},
                            {"first_divergence_mean", first_sum / double(refs.size())},
                            {"token_agreement", agree / double(steps_total)}};
      for (int m = 0; m < 3; ++m)
        row[fmt::format("kl_at_{}", marks[m])] =
            kl_at_n[size_t(m)] ? nlohmann::json(kl_at[size_t(m)] / double(kl_at_n[size_t(m)]))
                               : nlohmann::json(nullptr);
      spdlog::info("{} at {}x: KL {:.4f}", name, ratio, row["kl_mean"].get<double>());
      rows.push_back(row);
    }

  if (a.json) {
    std::cout << nlohmann::json{{"prompts", prompts.size()}, {"steps", a.steps}, {"rows", rows}}.dump(2)
              << "\n";
    return 0;
  }
  std::cout << fmt::format("bench divergence: lossy decoding vs full-KV decoding, {} prompts, {} "
                           "greedy steps (teacher-forced on the full run's tokens)\n\n",
                           prompts.size(), a.steps);
  std::cout << fmt::format("{:<26} {:>5} {:>8} {:>9} {:>9} {:>9} {:>9} {:>11} {:>9}\n",
                           "compressor", "ratio", "achieved", "KL mean", "KL@64", "KL@128",
                           "KL@256", "first diff", "agree");
  auto cell = [](const nlohmann::json& v) {
    return v.is_null() ? std::string("-") : fmt::format("{:.4f}", v.get<double>());
  };
  for (const auto& r : rows)
    std::cout << fmt::format("{:<26} {:>4g}x {:>7.2f}x {:>9.4f} {:>9} {:>9} {:>9} {:>11.1f} {:>8.1f}%\n",
                             r["compressor"].get<std::string>(), r["ratio"].get<double>(),
                             r["achieved_ratio"].get<double>(), r["kl_mean"].get<double>(),
                             cell(r["kl_at_64"]), cell(r["kl_at_128"]), cell(r["kl_at_256"]),
                             r["first_divergence_mean"].get<double>(),
                             100 * r["token_agreement"].get<double>());
  std::cout << "\nKL in nats per step (mean over prompts); first diff: mean step of the first "
               "greedy mismatch (= steps when none); agree: steps whose argmax matches.\n";
  return 0;
}

}  // namespace

void add_bench_divergence_command(CLI::App& bench, Runner& run) {
  auto a = std::make_shared<DivergenceArgs>();
  CLI::App* cmd = bench.add_subcommand("divergence", "Drift of lossy decoding from full KV");
  cmd->add_option("--model", a->model_dir, "Model directory")->capture_default_str();
  cmd->add_option("--prompts", a->prompts, "Golden JSON or JSONL prompt file")->capture_default_str();
  cmd->add_option("--compressor", a->compressors, "Methods to measure (default: all)");
  cmd->add_option("--ratios", a->ratios, "Compression ratios")->capture_default_str()
      ->check(number_in(1.0, kMaxRatio));
  cmd->add_option("--steps", a->steps, "Greedy steps per prompt")->capture_default_str()
      ->check(integer_in(1, 1 << 20));
  cmd->add_option("--max-prompts", a->max_prompts, "Use the first N prompts (0 = all)")
      ->check(integer_in(0));
  cmd->add_flag("--json", a->json, "Print JSON");
  cmd->callback([&run, a] { run = [a] { return run_divergence(*a); }; });
}

}  // namespace vc::cli
