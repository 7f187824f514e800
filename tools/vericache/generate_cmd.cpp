// `vericache generate`: one request, text or JSON out.
#include <fstream>
#include <iostream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "kernels/cpu/cpu_features.hpp"
#include "kernels/error.hpp"
#include "runtime/generator.hpp"
#include "tools/vericache/commands.hpp"

namespace vc::cli {

namespace {

struct GenerateArgs {
  std::string model_dir = default_model_dir();
  std::string prompt;
  std::string prompt_file;
  int max_tokens = 128;
  float temperature = 0.0f;
  int top_k = 0;
  float top_p = 1.0f;
  uint64_t seed = 0;
  std::vector<std::string> stop;
  bool logprobs = false;
  bool json = false;
  bool ignore_eos = false;
  int threads = 0;
  std::string kv_dtype = "bf16";
  std::string mode = "full";
  std::string compressor = "snapkv";
  double ratio = 4.0;
  std::string draft = "16";
  std::vector<std::string> compressor_params;
  size_t fold_every = 64;
  std::string full_tier = "host";
  std::string disk_dir;
};

std::string read_prompt(const GenerateArgs& a) {
  if (a.prompt_file.empty()) return a.prompt;
  std::ifstream in(a.prompt_file, std::ios::binary);
  if (!in) throw Error("--prompt-file: cannot open '" + a.prompt_file + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// 9 significant digits: enough to tell any two floats apart, stable across runs.
double nine_digits(float v) { return std::stod(fmt::format("{:.9g}", v)); }

int run_generate(const GenerateArgs& a) {
  const std::string prompt = read_prompt(a);
  spdlog::info("loading model from {}", a.model_dir);
  auto model = Model::load(a.model_dir);
  auto tok = std::make_shared<const Tokenizer>(
      Tokenizer::from_file(std::filesystem::path(a.model_dir) / "tokenizer.json"));
  GeneratorConfig gc;
  gc.threads = a.threads;
  gc.kv_dtype = a.kv_dtype == "f32" ? DType::f32 : DType::bf16;
  gc.full_tier = a.full_tier;
  gc.disk_dir = a.disk_dir;
  Generator gen(model, tok, gc);

  GenerateOptions opt;
  opt.max_tokens = a.max_tokens;
  opt.sampling = SamplingParams{a.temperature, a.top_k, a.top_p, a.seed};
  opt.stop = a.stop;
  opt.stop_at_eos = !a.ignore_eos;
  opt.mode = parse_decode_mode(a.mode);
  opt.fold_every = a.fold_every;
  if (a.draft == "auto") {
    opt.draft_auto = true;
  } else {
    try {
      size_t used = 0;
      const long v = std::stol(a.draft, &used);
      if (used != a.draft.size() || v < 0 || v > 4096) throw std::invalid_argument("range");
      opt.draft_length = size_t(v);
    } catch (const std::exception&) {
      throw Error("--draft: expected a length 0..4096 or 'auto', got '" + a.draft + "'");
    }
  }
  opt.compressor = a.compressor;
  for (const auto& p : a.compressor_params) opt.compressor_params.push_back(parse_compressor_setting(p));
  opt.ratio = a.ratio;
  const GenerateResult r = gen.generate(prompt, opt);

  const GenerateStats& s = r.stats;
  if (a.json) {
    nlohmann::json j;
    j["prompt_ids"] = r.prompt_ids;
    j["output_ids"] = r.output_ids;
    j["text"] = r.text;
    j["finish_reason"] = r.finish_reason;
    if (a.logprobs) {
      nlohmann::json lp = nlohmann::json::array();
      for (float v : r.output_logprobs) lp.push_back(nine_digits(v));
      j["output_logprobs"] = lp;
    }
    j["stats"] = {{"mode", a.mode},
                  {"prompt_tokens", s.prompt_tokens},
                  {"output_tokens", s.output_tokens},
                  {"prefill_seconds", s.prefill_seconds},
                  {"decode_seconds", s.decode_seconds},
                  {"prefill_tokens_per_second", s.prefill_tokens_per_second()},
                  {"decode_tokens_per_second", s.decode_tokens_per_second()},
                  {"kv_bytes", s.kv_bytes},
                  {"kv_dtype", a.kv_dtype},
                  {"threads", gen.workspace().threads()},
                  {"simd", std::string(cpu::simd_path_name(cpu::active_simd_path()))}};
    if (opt.mode == DecodeMode::vericache) {
      nlohmann::json hist = s.accepted_histogram;
      j["stats"]["vericache"] = {
          {"draft", a.draft},
          {"rounds", s.rounds},
          {"drafted_tokens", s.drafted},
          {"accepted_tokens", s.accepted},
          {"accepted_per_round_mean", s.rounds ? double(s.accepted) / double(s.rounds) : 0.0},
          {"emitted_per_round_mean",
           s.rounds ? double(s.output_tokens - 1) / double(s.rounds) : 0.0},
          {"accepted_per_round_histogram", hist},
          {"acceptance_rate", s.drafted ? double(s.accepted) / double(s.drafted) : 0.0},
          {"draft_seconds", s.draft_seconds},
          {"verify_seconds", s.verify_seconds},
          {"verify_wait_seconds", s.verify_wait_seconds},
          {"commit_seconds", s.commit_seconds},
          {"full_tier", s.full_tier},
          {"bytes_read", {{"full_tier", s.full_tier_bytes_read},
                          {"compressed_tier", s.compressed_bytes_read}}},
          {"full_tier_bytes_written", s.full_tier_bytes_written},
          {"view_rebuilds", s.folds},
          {"fast_bytes_at_end", s.fast_bytes_end}};
    }
    if (opt.mode != DecodeMode::full)
      j["stats"]["compression"] = {{"compressor", a.compressor},
                                   {"ratio", a.ratio},
                                   {"compressed_bytes", s.compressed_bytes},
                                   {"full_bytes_of_same_positions", s.compressed_full_bytes},
                                   {"achieved_ratio", s.compressed_bytes > 0
                                                          ? double(s.compressed_full_bytes) /
                                                                double(s.compressed_bytes)
                                                          : 0.0},
                                   {"compress_seconds", s.compress_seconds}};
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    std::cout << prompt << r.text << std::endl;  // flushed before the stats on stderr
    std::cerr << fmt::format(
        "--\nprompt {} tokens, prefill {:.1f} tok/s | output {} tokens ({}), decode {:.1f} "
        "tok/s | KV {} KiB ({}) | {} threads, {}\n",
        s.prompt_tokens, s.prefill_tokens_per_second(), s.output_tokens, r.finish_reason,
        s.decode_tokens_per_second(), s.kv_bytes / 1024, a.kv_dtype, gen.workspace().threads(),
        cpu::simd_path_name(cpu::active_simd_path()));
    if (opt.mode != DecodeMode::full)
      std::cerr << fmt::format("{} {} at {}x: compressed view {} KiB of {} KiB\n", a.mode,
                               a.compressor, a.ratio, s.compressed_bytes / 1024,
                               s.compressed_full_bytes / 1024);
    if (opt.mode == DecodeMode::vericache)
      std::cerr << fmt::format(
          "vericache: {} rounds, {:.2f} tokens/round, {} of {} drafts accepted ({:.0f}%), "
          "draft {:.3f} s, verify {:.3f} s, full tier ({}) read {} KiB, view rebuilt {} "
          "times (ids and logprobs are those of --mode full)\n",
          s.rounds, s.rounds ? double(s.output_tokens - 1) / double(s.rounds) : 0.0, s.accepted,
          s.drafted, s.drafted ? 100.0 * double(s.accepted) / double(s.drafted) : 0.0,
          s.draft_seconds, s.verify_seconds, s.full_tier, s.full_tier_bytes_read / 1024, s.folds);
  }
  return 0;
}

}  // namespace

void add_generate_command(CLI::App& app, Runner& run) {
  auto a = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate text for one prompt");
  cmd->add_option("--model", a->model_dir, "Model directory (Hugging Face layout)")
      ->capture_default_str();
  auto* p = cmd->add_option("--prompt", a->prompt, "Prompt text");
  auto* pf = cmd->add_option("--prompt-file", a->prompt_file, "Read the prompt from a file");
  p->excludes(pf);
  cmd->add_option("--max-tokens", a->max_tokens, "Tokens to generate at most")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--temperature", a->temperature, "0 = greedy")->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-k", a->top_k, "Keep the k most likely tokens (0 = all)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-p", a->top_p, "Nucleus sampling mass in (0, 1]")->capture_default_str()
      ->check(CLI::Range(0.0f, 1.0f));
  cmd->add_option("--seed", a->seed, "Sampling seed")->capture_default_str();
  cmd->add_option("--stop", a->stop, "Stop string (repeatable)");
  cmd->add_flag("--ignore-eos", a->ignore_eos, "Keep generating past the end-of-text token");
  cmd->add_flag("--logprobs", a->logprobs, "Add output_logprobs to --json output");
  cmd->add_flag("--json", a->json, "Print one JSON object");
  cmd->add_option("--threads", a->threads, "Worker threads (0 = auto)")->capture_default_str();
  cmd->add_option("--kv-dtype", a->kv_dtype, "KV cache storage")->capture_default_str()
      ->check(CLI::IsMember({"bf16", "f32"}));
  cmd->add_option("--mode", a->mode, "full: full-KV decoding; lossy: decode over the "
                  "compressed KV alone (drifts; for comparison); vericache: draft over the "
                  "compressed KV, verify against the full KV (exact)")
      ->capture_default_str()->check(CLI::IsMember({"full", "lossy", "vericache"}));
  cmd->add_option("--draft", a->draft, "vericache: drafts per round, or 'auto'")
      ->capture_default_str();
  cmd->add_option("--fold-every", a->fold_every,
                  "vericache: rebuild the compressed view after this many verified tokens (0 = never)")
      ->capture_default_str();
  cmd->add_option("--full-tier", a->full_tier, "vericache: where the full KV lives")
      ->capture_default_str()->check(CLI::IsMember({"host", "disk"}));
  cmd->add_option("--disk-dir", a->disk_dir, "vericache: directory of the disk tier");
  cmd->add_option("--compressor", a->compressor, "Compression method (see `vericache compressors`)")
      ->capture_default_str();
  cmd->add_option("--compressor-param", a->compressor_params,
                  "A method parameter NAME=VALUE (repeatable; see `vericache compressors`)");
  cmd->add_option("--ratio", a->ratio, "Compression ratio: full KV bytes / compressed bytes")
      ->capture_default_str()->check(CLI::Range(1.0, 1000.0));
  cmd->callback([&run, a, p, pf] {
    if (p->count() == 0 && pf->count() == 0)
      throw CLI::ValidationError("generate", "one of --prompt or --prompt-file is required");
    run = [a] { return run_generate(*a); };
  });
}

}  // namespace vc::cli
