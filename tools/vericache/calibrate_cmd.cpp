// `vericache calibrate kvzap`: fits KVzap's surrogate of a model to this runtime's
// own KVzip-style scores over the given text files (runtime/kvzap_calibration.hpp)
// and writes kvzap.safetensors (runtime/kvzap_file.hpp), printing R^2 per layer.
#include <chrono>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "kernels/error.hpp"
#include "runtime/generator.hpp"
#include "runtime/kvzap_calibration.hpp"
#include "runtime/kvzap_file.hpp"
#include "runtime/model/bounded_input.hpp"
#include "runtime/model/tokenizer.hpp"
#include "runtime/request_validation.hpp"
#include "tools/vericache/commands.hpp"
#include "tools/vericache/options.hpp"

namespace vc::cli {
namespace {

struct CalibrateArgs {
  std::string model_dir = default_model_dir();
  std::vector<std::string> data;
  size_t generate = 0;  // texts the model writes itself (from --seed), besides --data
  std::string form = "linear";
  std::string out;  // default: MODEL/kvzap.safetensors
  size_t max_tokens = 512;
  double lambda = 1e-3;
  size_t units = 64, epochs = 30;
  std::string seed = "1";
  std::string targets = "kvzip";
  size_t holdout = 0;  // texts the model writes itself for a held-out R^2, not fitted
  int threads = 0;
};

int run_calibrate(const CalibrateArgs& a) {
  const auto t0 = std::chrono::steady_clock::now();
  if (!a.out.empty()) {  // a fit that cannot be written fails before it runs
    const std::filesystem::path dir = std::filesystem::absolute(a.out).parent_path();
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec))
      throw Error("--out '" + a.out + "': directory '" + dir.string() + "' does not exist");
    if (std::filesystem::is_directory(a.out, ec))
      throw Error("--out '" + a.out + "': is a directory; expected a file path");
    for (const std::string& f : a.data)
      if (std::filesystem::equivalent(a.out, f, ec))
        throw Error("--out '" + a.out + "': is the --data file '" + f + "'; the fit would write over its input");
  }
  const auto model = Model::load(a.model_dir);
  const Tokenizer tok = Tokenizer::from_file(std::filesystem::path(a.model_dir) / "tokenizer.json");
  KvzapFitOptions opt;
  opt.form = parse_kvzap_form(a.form);
  opt.ridge_lambda = a.lambda;
  opt.mlp.units = a.units;
  opt.mlp.epochs = a.epochs;
  opt.mlp.seed = parse_seed("--seed", a.seed);
  // Each file is tokenized as written and cut into texts of at most --max-tokens.
  std::vector<std::vector<int32_t>> texts;
  size_t tokens = 0;
  for (const std::string& f : a.data) {
    const std::string text = read_file_bounded(f, kMaxTextFileBytes, "--data '" + f + "'");
    if (text.find('\0') != std::string::npos)
      throw Error("--data '" + f + "': holds binary data (a NUL byte); expected text");
    const std::vector<int32_t> ids = tok.encode(text);
    if (ids.size() < 2) throw Error("--data '" + f + "': fewer than 2 tokens of text");
    for (size_t b = 0; b < ids.size(); b += a.max_tokens) {
      const size_t e = std::min(ids.size(), b + a.max_tokens);
      if (e - b < 2) continue;
      texts.emplace_back(ids.begin() + long(b), ids.begin() + long(e));
      tokens += e - b;
    }
  }
  // Texts the model writes itself (kvzap_generated_texts), from seed + i.
  auto written = [&](size_t count, uint64_t seed) {
    GeneratorConfig gc;
    gc.max_context = a.max_tokens + 16;
    gc.threads = a.threads;
    Generator gen(model, std::make_shared<const Tokenizer>(Tokenizer::from_file(
                             std::filesystem::path(a.model_dir) / "tokenizer.json")),
                  gc);
    return kvzap_generated_texts(gen, count, a.max_tokens, seed);
  };
  if (a.generate > 0) {
    for (auto& ids : written(a.generate, opt.mlp.seed)) {
      tokens += ids.size();
      texts.push_back(std::move(ids));
    }
  }
  if (texts.empty()) throw Error("calibrate kvzap: no text (give --data FILES or --generate N)");
  Workspace ws(a.threads);
  const KvzapTargets targets = parse_kvzap_targets(a.targets);
  const std::vector<KvzapSamples> samples = kvzap_samples(*model, texts, ws, targets);
  const KvzapFit fit = fit_kvzap(*model, samples, opt, ws);
  // Held out: texts the model writes from other seeds (--seed + 1000000 + i).
  std::vector<double> held_r2;
  if (a.holdout > 0) {
    const auto held = kvzap_samples(*model, written(a.holdout, opt.mlp.seed + 1000000), ws, targets);
    for (size_t l = 0; l < held.size(); ++l)
      held_r2.push_back(r_squared(held[l], predict(fit.surrogate, l, held[l])));
  }
  const std::filesystem::path out =
      a.out.empty() ? std::filesystem::path(a.model_dir) / kKvzapFileName : std::filesystem::path(a.out);
  std::string r2_text;
  for (double r : fit.r2) r2_text += (r2_text.empty() ? "" : " ") + fmt::format("{:.4f}", r);
  std::string command = "vericache calibrate kvzap --form " + a.form;
  if (targets != KvzapTargets::kvzip) command += " --targets " + a.targets;
  if (opt.form == KvzapForm::mlp)
    command += fmt::format(" --units {} --epochs {}", a.units, a.epochs);
  else
    command += fmt::format(" --lambda {}", a.lambda);
  command += fmt::format(" --max-tokens {}", a.max_tokens);
  for (const std::string& f : a.data) command += " --data " + std::filesystem::path(f).filename().string();
  if (a.generate > 0) command += fmt::format(" --generate {} --seed {}", a.generate, a.seed);
  save_kvzap(out, fit.surrogate, {{"command", command}, {"r2", r2_text},
                                  {"tokens", std::to_string(tokens)}});
  std::cout << fmt::format("calibrate kvzap: {} surrogate, {} texts, {} tokens\n", a.form,
                           texts.size(), tokens);
  std::cout << fmt::format("targets: {}\n", a.targets);
  std::cout << (held_r2.empty() ? "layer  R^2 (on the calibration tokens)\n"
                                : fmt::format("layer  R^2 (on the calibration tokens)  R^2 (held out: {} texts)\n", a.holdout));
  for (size_t l = 0; l < fit.r2.size(); ++l)
    std::cout << (held_r2.empty() ? fmt::format("{:5}  {:.4f}\n", l, fit.r2[l])
                                  : fmt::format("{:5}  {:.4f}  {:.4f}\n", l, fit.r2[l], held_r2[l]));
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << fmt::format("wrote {} ({} bytes) in {:.1f} s\n", out.string(),
                           std::filesystem::file_size(out), secs);
  return 0;
}

}  // namespace

void add_calibrate_command(CLI::App& app, Runner& run) {
  CLI::App* cal = app.add_subcommand("calibrate", "Fit what a compressor learns from a model");
  cal->require_subcommand(1);
  auto a = std::make_shared<CalibrateArgs>();
  CLI::App* kvzap = cal->add_subcommand(
      "kvzap", "KVzap's surrogate: predicts KVzip-style scores from hidden states");
  kvzap->add_option("--model", a->model_dir, "Model directory")->capture_default_str();
  kvzap->add_option("--data", a->data, "Text files to calibrate on");
  kvzap->add_option("--generate", a->generate,
                    "Also calibrate on N texts the model samples itself (seeded by --seed)")
      ->capture_default_str()->check(integer_in(0, 100000));
  kvzap->add_option("--form", a->form, "Surrogate form")->capture_default_str()
      ->check(CLI::IsMember({"linear", "mlp"}));
  kvzap->add_option("--out", a->out, "Output file (default: MODEL/kvzap.safetensors)")
      ->check([](const std::string& v) { return v.empty() ? std::string("expected a file path, got ''") : std::string(); });
  kvzap->add_option("--max-tokens", a->max_tokens, "Tokens per text (files are cut into texts)")
      ->capture_default_str()->check(integer_in(2, 8192));
  kvzap->add_option("--lambda", a->lambda, "Ridge penalty of the linear form")
      ->capture_default_str()->check(number_in(0.0, 1e6));
  kvzap->add_option("--units", a->units, "Hidden units of the mlp form")
      ->capture_default_str()->check(integer_in(1, 65536));
  kvzap->add_option("--epochs", a->epochs, "Training epochs of the mlp form")
      ->capture_default_str()->check(integer_in(1, 100000));
  kvzap->add_option("--seed", a->seed, "Seed of the mlp trainer and of --generate")->capture_default_str()
      ->check(seed_value());
  kvzap->add_option("--targets", a->targets,
                    "kvzip: the kvzip method's score; kvzip-plus: kvpress's KVzip+ "
                    "(attention x ||W_o v|| / ||h||)")
      ->capture_default_str()->check(CLI::IsMember({"kvzip", "kvzip-plus"}));
  kvzap->add_option("--holdout", a->holdout,
                    "Also report R^2 on N texts the model writes from other seeds (not fitted)")
      ->capture_default_str()->check(integer_in(0, 100000));
  kvzap->add_option("--threads", a->threads, "Threads (0 = auto)")->capture_default_str()
      ->check(integer_in(0, 1024));
  kvzap->callback([&run, a] { run = [a] { return run_calibrate(*a); }; });
}

}  // namespace vc::cli
