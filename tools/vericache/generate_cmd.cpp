// `vericache generate`: one request, text or JSON out.
#include <iostream>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "kernels/cpu/cpu_features.hpp"
#include "kernels/error.hpp"
#include "kvtiers/tier_stats.hpp"
#include "runtime/device.hpp"
#include "runtime/generator.hpp"
#include "runtime/linear_backend.hpp"
#include "runtime/tp_generator.hpp"
#include "runtime/model/bounded_input.hpp"
#include "runtime/model/safetensors.hpp"
#include "runtime/request_validation.hpp"
#include "tools/vericache/commands.hpp"
#include "tools/vericache/logprobs_json.hpp"
#include "tools/vericache/options.hpp"

namespace vc::cli {

namespace {

struct GenerateArgs {
  std::string model_dir = default_model_dir();
  std::string prompt;
  std::string prompt_file;
  RequestInput request;  // the request's fields; defaults shared with batch lines
  std::string seed = "0";
  std::vector<std::string> compressor_params;
  std::string threshold;  // --threshold TAU: select by threshold instead of --ratio
  size_t keep_recent = 128;
  bool json = false;
  int threads = 0;
  int tp = 1;  // --tp: tensor-parallel degree (CPU ranks)
  std::string kv_dtype = "bf16";
  std::string full_tier = "host";
  std::string disk_dir;
  std::string fast_memory = "0";
  double gpu_memory_utilization = kDefaultGpuMemoryUtilization;
  std::string full_tier_budget = "0";
  size_t stage_positions = 1024;
  size_t block_tokens = kDefaultBlockTokens;
  std::string device = "cpu";
  std::string row_costs;  // --row-costs FILE
  std::string remote;     // --remote redis://HOST:PORT
  size_t remote_chunk = 256;
  int remote_ttl = 86400;
  int remote_timeout_ms = 1000;
  int remote_retry_ms = 5000;
  std::string remote_flow = "compressed-first";
  size_t remote_predraft = 256;
  bool remote_recompute_front = false;
};

std::string read_prompt(const GenerateArgs& a) {
  if (a.prompt_file.empty()) return a.prompt;
  std::string text =
      read_file_bounded(a.prompt_file, kMaxPromptBytes, "--prompt-file '" + a.prompt_file + "'");
  if (text.empty()) throw Error("--prompt-file '" + a.prompt_file + "': the file is empty");
  return text;
}

// The request, checked by the shared validation layer; a bad field is reported
// as the option that sets it ("--max-tokens: expected ...").
ValidRequest validated_request(const GenerateArgs& a, const std::string& prompt, const Model& model,
                               const Tokenizer& tok) {
  RequestInput in = a.request;
  in.prompt = prompt;
  try {
    in.seed = parse_seed("seed", a.seed);
    if (!a.threshold.empty()) {
      in.compressor_params.emplace_back("threshold", parse_number("threshold", a.threshold));
      in.compressor_params.emplace_back("keep_recent", double(a.keep_recent));
    }
    for (const auto& p : a.compressor_params) {
      try {
        in.compressor_params.push_back(parse_compressor_setting(p));
      } catch (const Error& e) {
        throw FieldError("compressor_param", e.what());
      }
    }
    return validate_request(in, RequestLimits::of(model.config()), &tok);
  } catch (const FieldError& e) {
    const std::string option = a.prompt_file.empty() || e.field() != "prompt"
                                   ? option_of_field(e.field())
                                   : "--prompt-file '" + a.prompt_file + "'";
    throw Error(option + ": " + e.message());
  }
}

int run_generate(const GenerateArgs& a) {
  const std::string prompt = read_prompt(a);
  // A bad --row-costs file fails before the model loads.
  const auto row_costs = a.row_costs.empty() ? std::vector<std::pair<double, double>>{}
                                             : load_row_costs(a.row_costs);
  spdlog::info("loading model from {}", a.model_dir);
  const Device device = parse_device(a.device);
  if (!device.is_cpu() && a.tp > 1)
    throw Error("--device " + a.device + ": --tp runs its ranks on the CPU only (for now)");
  auto model = Model::on_device(Model::load(a.model_dir), device);
  if (!device.is_cpu()) spdlog::info("weight products on {}", model->linear_backend()->description());
  auto tok = std::make_shared<const Tokenizer>(
      Tokenizer::from_file(std::filesystem::path(a.model_dir) / "tokenizer.json"));
  const ValidRequest v = validated_request(a, prompt, *model, *tok);
  GenerateOptions opt = v.options;
  for (const auto& [rows, seconds] : row_costs) opt.row_costs.push_back({rows, seconds});
  GeneratorConfig gc;
  gc.threads = a.threads;
  gc.kv_dtype = a.kv_dtype == "f32" ? DType::f32 : DType::bf16;
  gc.full_tier = a.full_tier;
  gc.fast_memory_bytes = parse_bytes("--fast-memory", a.fast_memory);
  if (gc.fast_memory_bytes == 0 && !device.is_cpu()) {  // fast memory is the GPU's
    gc.fast_memory_bytes = device_kv_budget(cuda_memory(device.index), a.gpu_memory_utilization, device.str(),
                                          host_available_memory());
    spdlog::info("fast-memory budget {} of {}'s free memory (--gpu-memory-utilization {})",
                 format_bytes(gc.fast_memory_bytes), device.str(), a.gpu_memory_utilization);
  }
  gc.full_tier_bytes = parse_bytes("--full-tier-budget", a.full_tier_budget);
  gc.stage_positions = a.stage_positions;
  gc.block_tokens = a.block_tokens;
  gc.disk_dir = a.disk_dir;
  gc.remote_url = a.remote;
  if (!a.remote.empty()) check_remote_chunk(a.remote_chunk, a.block_tokens);
  // Options this run does not use are said so, not dropped silently.
  if (!a.remote.empty() && opt.mode == DecodeMode::full)
    spdlog::warn("--remote is not used with --mode full (full decoding computes the whole prompt "
                 "here); it serves lossy and vericache");
  if (!a.disk_dir.empty() && a.full_tier != "disk")
    spdlog::warn("--disk-dir is not used without --full-tier disk");
  gc.remote_chunk_tokens = a.remote_chunk;
  gc.remote_ttl_seconds = a.remote_ttl;
  gc.remote_timeout_ms = a.remote_timeout_ms;
  gc.remote_retry_ms = a.remote_retry_ms;
  gc.remote_compressed_first = a.remote_flow == "compressed-first";
  gc.remote_predraft = a.remote_predraft;
  gc.remote_recompute_front = a.remote_recompute_front;
  // --tp > 1: one rank per thread over the model's shards (runtime/tp_generator.hpp).
  std::optional<Generator> gen;
  std::optional<TpGenerator> tp_gen;
  if (a.tp > 1) tp_gen.emplace(model, tok, a.tp, gc);
  else gen.emplace(model, tok, gc);
  const GenerateResult r = tp_gen ? tp_gen->generate(v.prompt_ids, opt) : gen->generate(v.prompt_ids, opt);
  const int threads = gen ? gen->workspace().threads() : std::max(1, a.threads > 0 ? a.threads : default_thread_count() / a.tp);

  const GenerateStats& s = r.stats;
  if (a.json) {
    nlohmann::json j;
    j["prompt_ids"] = r.prompt_ids;
    j["output_ids"] = r.output_ids;
    j["text"] = r.text;
    j["finish_reason"] = r.finish_reason;
    if (v.logprobs) j["output_logprobs"] = logprobs_json(r.output_logprobs);
    if (v.top_logprobs() > 0) j["output_top_logprobs"] = top_logprobs_json(r.output_top_logprobs);
    j["stats"] = {{"mode", a.request.mode},
                  {"prompt_tokens", s.prompt_tokens},
                  {"output_tokens", s.output_tokens},
                  {"prefill_seconds", s.prefill_seconds},
                  {"decode_seconds", s.decode_seconds},
                  {"prefill_tokens_per_second", s.prefill_tokens_per_second()},
                  {"decode_tokens_per_second", s.decode_tokens_per_second()},
                  {"kv_bytes", s.kv_bytes},
                  {"time_to_first_token_seconds", s.time_to_first_token_seconds},
                  {"fast_memory", {{"peak_bytes", s.fast_bytes_peak},
                                   {"peak_kv_bytes", s.fast_kv_bytes_peak},
                                   {"budget_bytes", gc.fast_memory_bytes}}},
                  {"kv_dtype", a.kv_dtype},
                  {"threads", threads},
                  {"tensor_parallel", a.tp},
                  {"device", device.str()},
                  {"device_bytes", model->device_bytes()},
                  {"simd", std::string(cpu::simd_path_name(cpu::active_simd_path()))},
                  {"weights", weight_load() == WeightLoad::map ? "mapped" : "read"}};
    if (s.remote)
      j["stats"]["remote"] = {{"url", a.remote},
                              {"chunk_tokens", a.remote_chunk},
                              {"chunks_hit", s.remote_chunks_hit},
                              {"positions_hit", s.remote_positions},
                              {"bytes_fetched_full", s.remote_bytes_full},
                              {"bytes_fetched_compressed", s.remote_bytes_compressed},
                              {"fetch_seconds", s.remote_fetch_seconds},
                              {"stop_reason", s.remote_stop_reason},
                              {"chunks_published", s.remote_chunks_published},
                              {"front_recomputed", s.remote_front_recomputed},
                              {"flow", a.remote_flow},
                              {"compressed_first", s.remote_compressed_first},
                              {"compressed_chunks_hit", s.remote_compressed_chunks_hit},
                              {"compressed_positions_hit", s.remote_compressed_positions},
                              {"compressed_fetch_seconds", s.remote_compressed_fetch_seconds},
                              {"compressed_stop_reason", s.remote_compressed_stop_reason},
                              {"predrafted", s.remote_predrafted},
                              {"predraft_rounds", s.remote_predraft_rounds},
                              {"full_wait_seconds", s.remote_full_wait_seconds},
                              {"compressed_chunks_published", s.remote_compressed_chunks_published}};
    if (opt.mode == DecodeMode::vericache) {
      nlohmann::json hist = s.accepted_histogram;
      j["stats"]["vericache"] = {
          {"draft", a.request.draft},
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
          {"full_tier_bytes_read_by_view_rebuilds", s.full_tier_bytes_read_refold},
          {"fast_bytes_at_end", s.fast_bytes_end},
          {"draft_hierarchy", draft_hierarchy_name(opt.draft_hierarchy)},
          {"levels", {{"ngram", {{"proposed", s.levels.ngram_proposed},
                                 {"kept_by_drafter", s.levels.ngram_confirmed},
                                 {"accepted_by_verifier", s.levels.ngram_accepted},
                                 {"seconds", s.levels.ngram_seconds}}},
                      {"drafter", {{"passes", s.levels.drafter_passes},
                                   {"own_drafts", s.levels.drafter_own},
                                   {"seconds", s.draft_seconds}}},
                      {"verifier", {{"passes", s.rounds},
                                    {"accepted", s.accepted},
                                    {"seconds", s.verify_seconds}}}}}};
    }
    if (opt.mode != DecodeMode::full)
      j["stats"]["compression"] = {{"compressor", opt.compressor},
                                   {"ratio", opt.ratio},
                                   {"selection", a.threshold.empty() ? "ratio" : "threshold"},
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
        "tok/s | KV {} KiB ({}) | {} threads{}, {}\n",
        s.prompt_tokens, s.prefill_tokens_per_second(), s.output_tokens, r.finish_reason,
        s.decode_tokens_per_second(), s.kv_bytes / 1024, a.kv_dtype, threads,
        a.tp > 1 ? fmt::format(" x {} tensor-parallel ranks", a.tp) : "", cpu::simd_path_name(cpu::active_simd_path()));
    if (opt.mode != DecodeMode::full)
      std::cerr << fmt::format("{} {} {}: compressed view {} KiB of {} KiB (achieved {:.2f}x)\n",
                               a.request.mode, opt.compressor,
                               a.threshold.empty() ? fmt::format("at {}x", opt.ratio)
                                                   : "threshold " + a.threshold,
                               s.compressed_bytes / 1024, s.compressed_full_bytes / 1024,
                               s.compressed_bytes > 0 ? double(s.compressed_full_bytes) /
                                                            double(s.compressed_bytes)
                                                      : 0.0);
    if (opt.mode == DecodeMode::vericache)
      std::cerr << fmt::format(
          "vericache: {} rounds, {:.2f} tokens/round, {} of {} drafts accepted ({:.0f}%), "
          "draft {:.3f} s, verify {:.3f} s, full tier ({}) read {} KiB, view rebuilt {} "
          "times (ids and logprobs are those of --mode full)\n",
          s.rounds, s.rounds ? double(s.output_tokens - 1) / double(s.rounds) : 0.0, s.accepted,
          s.drafted, s.drafted ? 100.0 * double(s.accepted) / double(s.drafted) : 0.0,
          s.draft_seconds, s.verify_seconds, s.full_tier, s.full_tier_bytes_read / 1024, s.folds);
    if (opt.mode == DecodeMode::vericache && opt.draft_hierarchy == DraftHierarchy::ngram)
      std::cerr << fmt::format(
          "draft hierarchy: ngram proposed {}, drafter kept {}, verifier accepted {} of them; "
          "drafter {} passes for {} drafts\n",
          s.levels.ngram_proposed, s.levels.ngram_confirmed, s.levels.ngram_accepted,
          s.levels.drafter_passes, s.drafted);
    if (s.remote)
      std::cerr << fmt::format(
          "remote {}: {} compressed chunks hit ({} KiB, {:.3f} s){}; {} full chunks hit ({} "
          "positions, {} KiB, {:.3f} s){}, {} + {} compressed chunks queued to publish | first "
          "token after {:.3f} s\n",
          a.remote, s.remote_compressed_chunks_hit, s.remote_bytes_compressed / 1024,
          s.remote_compressed_fetch_seconds,
          s.remote_compressed_first ? fmt::format(", drafting first ({} drafts while the full KV "
                                                  "arrived, waited {:.3f} s; {} rounds from them)",
                                                  s.remote_predrafted, s.remote_full_wait_seconds,
                                                  s.remote_predraft_rounds)
                                    : "",
          s.remote_chunks_hit, s.remote_positions, s.remote_bytes_full / 1024,
          s.remote_fetch_seconds,
          s.remote_stop_reason.empty() ? "" : "; then " + s.remote_stop_reason + ", recomputed",
          s.remote_chunks_published, s.remote_compressed_chunks_published,
          s.time_to_first_token_seconds);
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
  RequestInput& q = a->request;
  cmd->add_option("--max-tokens", q.max_tokens, "Tokens to generate at most (prompt + this must "
                  "fit the model's context)")->capture_default_str()->check(integer_in(1));
  cmd->add_option("--temperature", q.temperature, "0 = greedy")->capture_default_str()
      ->check(number_in(0.0));
  cmd->add_option("--top-k", q.top_k, "Keep the k most likely tokens (0 = all)")
      ->capture_default_str()->check(integer_in(0));
  cmd->add_option("--top-p", q.top_p, "Nucleus sampling mass in (0, 1]")->capture_default_str()
      ->check(number_in(0.0, 1.0, /*lo_open=*/true));
  cmd->add_option("--seed", a->seed, "Sampling seed, 0..2^64-1")->capture_default_str()
      ->check(seed_value());
  cmd->add_option("--stop", q.stop, "Stop string (repeatable)");
  cmd->add_flag("--ignore-eos", q.ignore_eos, "Keep generating past the end-of-text token");
  cmd->add_flag("--logprobs", q.logprobs, "Add output_logprobs to --json output");
  cmd->add_option("--top-logprobs", q.top_logprobs,
                  "Add output_top_logprobs to --json output: the N most likely tokens at each "
                  "output position (0..20; implies --logprobs)")
      ->capture_default_str()->check(integer_in(0, kMaxTopLogprobs));
  cmd->add_flag("--json", a->json, "Print one JSON object");
  cmd->add_option("--threads", a->threads, "Worker threads (0 = auto)")->capture_default_str()
      ->check(integer_in(0, 1024));
  cmd->add_option("--tp", a->tp,
                  "Tensor-parallel degree: ranks (threads) over shards of the model, KV sharded "
                  "by KV heads; --threads is then per rank")
      ->capture_default_str()->check(integer_in(1, 64));
  cmd->add_option("--kv-dtype", a->kv_dtype, "KV cache storage")->capture_default_str()
      ->check(CLI::IsMember({"bf16", "f32"}));
  cmd->add_option("--mode", q.mode, "full: full-KV decoding; lossy: decode over the "
                  "compressed KV alone (drifts; for comparison); vericache: draft over the "
                  "compressed KV, verify against the full KV (exact)")
      ->capture_default_str()->check(CLI::IsMember({"full", "lossy", "vericache"}));
  cmd->add_option("--draft", q.draft, "vericache: drafts per round (0..4096), or 'auto'")
      ->capture_default_str()->check(draft_value());
  add_draft_hierarchy_options(*cmd, q);
  cmd->add_option("--fold-every", q.fold_every,
                  "vericache: rebuild the compressed view after this many verified tokens (0 = never)")
      ->capture_default_str()->check(integer_in(0, int64_t(1) << 30));
  cmd->add_option("--full-tier", a->full_tier, "vericache: where the full KV lives")
      ->capture_default_str()->check(CLI::IsMember({"host", "disk"}));
  cmd->add_option("--disk-dir", a->disk_dir, "vericache: directory of the disk tier");
  cmd->add_option("--fast-memory", a->fast_memory,
                  "Fast-memory budget for KV (view, blocks, staging), e.g. 256M (0 = unlimited on "
                  "the CPU; on a GPU, its free memory: --gpu-memory-utilization)")
      ->capture_default_str()->check(bytes_value());
  cmd->add_option("--full-tier-budget", a->full_tier_budget,
                  "Budget of the full tier (host memory or disk), e.g. 4G (0 = unlimited)")
      ->capture_default_str()->check(bytes_value());
  cmd->add_option("--stage-positions", a->stage_positions,
                  "KV positions per staged chunk of the full KV (0 = whole layers)")
      ->capture_default_str()->check(integer_in(0, int64_t(1) << 24));
  add_block_tokens_option(*cmd, a->block_tokens);
  add_device_option(*cmd, a->device);
  add_gpu_memory_option(*cmd, a->gpu_memory_utilization);
  cmd->add_option("--row-costs", a->row_costs,
                  "vericache --draft auto: weigh verify passes with this measured row-cost "
                  "curve (the JSON of `vericache bench rows --json`)");
  cmd->add_option("--remote", a->remote,
                  "lossy/vericache: remote prefix cache redis://HOST:PORT (prefix KV fetched, "
                  "the rest prefilled and published; a store fault means recompute)");
  cmd->add_option("--remote-chunk", a->remote_chunk, "Tokens per remote chunk (whole KV blocks)")
      ->capture_default_str()->check(integer_in(1, 1 << 20));
  cmd->add_option("--remote-ttl", a->remote_ttl, "Seconds published chunks live (0 = no expiry)")
      ->capture_default_str()->check(integer_in(0, int64_t(1) << 30));
  cmd->add_option("--remote-flow", a->remote_flow,
                  "compressed-first: draft from the prefix's compressed chunks while its full "
                  "chunks arrive; full: fetch the full chunks, then prefill and compress here")
      ->capture_default_str()->check(CLI::IsMember({"compressed-first", "full"}));
  cmd->add_option("--remote-predraft", a->remote_predraft, kRemotePredraftHelp)
      ->capture_default_str()->check(integer_in(0, 1 << 20));
  cmd->add_flag("--remote-recompute-front", a->remote_recompute_front, kRemoteRecomputeFrontHelp);
  cmd->add_option("--remote-timeout-ms", a->remote_timeout_ms,
                  "Deadline of a connect and of each pipelined batch")
      ->capture_default_str()->check(integer_in(1, 600000));
  cmd->add_option("--remote-retry-ms", a->remote_retry_ms, kRemoteRetryHelp)
      ->capture_default_str()->check(integer_in(0, 3600000));
  cmd->add_option("--compressor", q.compressor, "Compression method (see `vericache compressors`)")
      ->capture_default_str();
  cmd->add_option("--compressor-param", a->compressor_params,
                  "A method parameter NAME=VALUE (repeatable; see `vericache compressors`)");
  cmd->add_option("--threshold", a->threshold,
                  "Token-dropping scorers: keep every position scoring >= TAU (plus the "
                  "method's always-kept positions and --keep-recent) instead of a --ratio "
                  "budget; the achieved ratio is reported")
      ->check(number_in(-std::numeric_limits<double>::max()));
  cmd->add_option("--keep-recent", a->keep_recent,
                  "With --threshold: the most recent positions always kept")
      ->capture_default_str()->check(integer_in(0, int64_t(1) << 30));
  cmd->add_option("--ratio", q.ratio, "Compression ratio: full KV bytes / compressed bytes")
      ->capture_default_str()->check(number_in(1.0, kMaxRatio));
  cmd->callback([&run, a, p, pf] {
    if (p->count() == 0 && pf->count() == 0)
      throw CLI::ValidationError("generate", "one of --prompt or --prompt-file is required");
    run = [a] { return run_generate(*a); };
  });
}

}  // namespace vc::cli
