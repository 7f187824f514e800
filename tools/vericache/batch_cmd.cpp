// `vericache batch`: runs a JSONL file of requests through the actor engine
// (vericache/engine.hpp), many at once, and writes one `generate --json`-style
// result line per input line, in input order. A bad line gets an "error" result;
// the others still run. A summary (throughput, busy fraction per resource) goes
// to stderr.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <filesystem>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <vericache/engine.hpp>

#include "kernels/error.hpp"
#include "kvtiers/paged_kv_cache.hpp"
#include "runtime/device_budget.hpp"
#include "runtime/model/bounded_input.hpp"
#include "runtime/model/config.hpp"
#include "runtime/model/tokenizer.hpp"
#include "runtime/request_validation.hpp"
#include "tools/vericache/commands.hpp"
#include "tools/vericache/logprobs_json.hpp"
#include "tools/vericache/options.hpp"
#include "tools/vericache/placement_option.hpp"
#include "tools/server/remote_stats_json.hpp"

namespace vc::cli {

namespace {

using nlohmann::json;

struct BatchArgs {
  std::string input;
  std::string output;
  size_t concurrency = 8;
  size_t verify_batch = vericache::EngineConfig{}.verify_batch;
  std::string model_dir = default_model_dir();
  std::string full_tier = "host";
  std::string disk_dir;
  double link_gbps = 0;
  bool lockstep = false;
  bool whole_prefill = false;  // --whole-prefill: EngineConfig::slice_prefill off
  size_t prefill_chunk = 256;  // --prefill-chunk
  std::string trace;
  int threads = 0;
  int tp = 1;  // --tp: tensor-parallel degree (EngineConfig::tp)
  std::string placement = "none";  // --placement (EngineConfig::placement)
  size_t max_queue = 0;  // 0 = the number of lines
  std::string kv_dtype = "bf16";
  std::string fast_memory = "0";
  double gpu_memory_utilization = kDefaultGpuMemoryUtilization;
  std::string full_tier_budget = "0";
  size_t stage_positions = 1024;
  size_t block_tokens = kDefaultBlockTokens;
  std::string device = "cpu";
  std::string row_costs;  // --row-costs FILE
  RequestInput line_defaults;  // --draft-hierarchy and the n-gram options
  RemoteArgs remote;
};

constexpr size_t kMaxLineBytes = size_t(16) << 20;

/// One input line: the request as received, then validated, or why it failed.
struct BatchLine {
  size_t line = 0;
  json id;
  RequestInput input;
  vericache::Request req;
  bool logprobs = false;
  int top_logprobs = 0;
  std::string error;
};

// Reads the JSON of one line into `b.input` (types and names only; ranges come
// with validate()).
BatchLine parse_line(const std::string& text, size_t line, const RequestInput& defaults) {
  BatchLine b;
  b.line = line;
  b.id = line;
  try {
    const json j = parse_json_bounded(text, "", {kMaxLineBytes, 64});
    if (j.is_object() && j.contains("id")) {  // errors below carry the id
      const json& id = j["id"];
      if (!id.is_string() && !id.is_number())
        throw FieldError("id", "expected a string or a number, got " + std::string(id.type_name()));
      b.id = id;
    }
    b.input = request_from_json(j, {"id"}, defaults);
  } catch (const std::exception& e) {
    b.error = fmt::format("line {}: {}", line, e.what());
  }
  return b;
}

// The shared checks (the same as `generate`'s), then the engine's request.
void validate(BatchLine& b, const RequestLimits& limits, const Tokenizer& tok) {
  if (!b.error.empty()) return;
  try {
    const ValidRequest v = validate_request(b.input, limits, &tok);
    const RequestInput& in = b.input;
    vericache::Request& r = b.req;
    r.prompt_ids = v.prompt_ids;
    r.max_tokens = v.options.max_tokens;
    r.mode = in.mode;
    r.compressor = in.compressor;
    r.compressor_params = in.compressor_params;
    r.ratio = in.ratio;
    r.draft = in.draft;
    r.fold_every = v.options.fold_every;
    r.draft_hierarchy = in.draft_hierarchy;
    r.ngram_min = v.options.ngram.min_n;
    r.ngram_max = v.options.ngram.max_n;
    r.ngram_proposal = v.options.ngram.max_proposal;
    r.temperature = v.options.sampling.temperature;
    r.top_k = v.options.sampling.top_k;
    r.top_p = v.options.sampling.top_p;
    r.seed = v.options.sampling.seed;
    r.stop = in.stop;
    r.ignore_eos = in.ignore_eos;
    r.top_logprobs = v.top_logprobs();
    b.logprobs = v.logprobs;
    b.top_logprobs = v.top_logprobs();
  } catch (const std::exception& e) {
    b.error = fmt::format("line {}: {}", b.line, e.what());
  }
}

json stats_json(const vericache::Request& q, const vericache::RequestStats& s,
                const BatchArgs& a) {
  const double decode = std::max(0.0, s.total_seconds - s.queue_seconds - s.prefill_seconds);
  json j = {{"mode", q.mode},
            {"prompt_tokens", s.prompt_tokens},
            {"output_tokens", s.output_tokens},
            {"queue_seconds", s.queue_seconds},
            {"prefill_seconds", s.prefill_seconds},
            {"decode_seconds", decode},
            {"total_seconds", s.total_seconds},
            {"prefill_tokens_per_second",
             s.prefill_seconds > 0 ? double(s.prompt_tokens) / s.prefill_seconds : 0.0},
            {"decode_tokens_per_second", decode > 0 ? double(s.output_tokens) / decode : 0.0},
            {"fast_bytes_peak", s.fast_bytes_peak},
            {"kv_dtype", a.kv_dtype},
            {"threads", a.threads},
            {"tensor_parallel", a.tp}};
  if (q.mode == "vericache") {
    json hist = s.accepted_histogram;
    const double rounds = double(s.rounds);
    j["vericache"] = {
        {"draft", q.draft},
        {"rounds", s.rounds},
        {"drafted_tokens", s.drafted},
        {"accepted_tokens", s.accepted},
        {"accepted_per_round_mean", s.rounds ? double(s.accepted) / rounds : 0.0},
        {"emitted_per_round_mean",
         s.rounds && s.output_tokens > 0 ? double(s.output_tokens - 1) / rounds : 0.0},
        {"accepted_per_round_histogram", hist},
        {"acceptance_rate", s.drafted ? double(s.accepted) / double(s.drafted) : 0.0},
        {"draft_seconds", s.draft_seconds},
        {"verify_seconds", s.verify_seconds},
        {"verify_requests_per_pass", s.rounds ? double(s.verify_pass_requests) / double(s.rounds) : 0.0},
        {"full_tier", a.full_tier},
        {"draft_hierarchy", q.draft_hierarchy},
        {"levels", {{"ngram", {{"proposed", s.ngram_proposed},
                               {"kept_by_drafter", s.ngram_confirmed},
                               {"accepted_by_verifier", s.ngram_accepted},
                               {"seconds", s.ngram_seconds}}},
                    {"drafter", {{"passes", s.drafter_passes}}}}}};
  }
  if (s.remote) {
    j["remote"] = vc::server::remote_stats_json(s);
    j["remote"]["url"] = a.remote.url;
    j["remote"]["chunk_tokens"] = a.remote.chunk;
    j["remote"]["flow"] = a.remote.flow;
  }
  if (q.mode != "full")
    j["compression"] = {{"compressor", q.compressor},
                        {"ratio", q.ratio},
                        {"compressed_bytes", s.compressed_bytes},
                        {"achieved_ratio", s.compressed_bytes > 0
                                               ? double(s.compressed_full_bytes) /
                                                     double(s.compressed_bytes)
                                               : 0.0}};
  return j;
}

json result_json(const BatchLine& b, const vericache::Result& r, const BatchArgs& a) {
  json j;
  j["id"] = b.id;
  if (!r.ok) {
    j["error"] = fmt::format("line {}: {}", b.line,
                             r.error.empty() ? "request " + r.finish_reason : r.error);
    j["finish_reason"] = r.finish_reason.empty() ? "error" : r.finish_reason;
    return j;
  }
  j["prompt_ids"] = r.prompt_ids;
  j["output_ids"] = r.output_ids;
  j["text"] = r.text;
  j["finish_reason"] = r.finish_reason;
  if (b.logprobs) j["output_logprobs"] = logprobs_json(r.output_logprobs);
  if (b.top_logprobs > 0) j["output_top_logprobs"] = top_logprobs_json(r.output_top_logprobs);
  j["stats"] = stats_json(b.req, r.stats, a);
  return j;
}

std::vector<BatchLine> read_lines(const std::string& path, const RequestInput& defaults) {
  const std::string what = "--input '" + path + "'";
  require_readable_file(path, what);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(what + ": cannot open");
  std::vector<BatchLine> lines;
  for (size_t n = 1;; ++n) {
    const std::optional<std::string> text = read_line_bounded(in, kMaxLineBytes, n, what);
    if (!text) break;
    if (text->find_first_not_of(" \t") == std::string::npos) continue;  // blank line
    lines.push_back(parse_line(*text, n, defaults));
  }
  if (in.bad()) throw Error(what + ": read failed");
  return lines;
}

void print_summary(const BatchArgs& a, size_t requests, size_t ok, size_t tokens, double wall,
                   double load, const vericache::EngineStats& st,
                   const std::vector<vericache::PlacementLine>& placement) {
  const std::string sim =
      a.link_gbps > 0 ? fmt::format(" (simulated link {:g} GB/s)", a.link_gbps) : "";
  std::cerr << fmt::format("batch: {} requests, {} ok, {} failed | concurrency {}{}{}\n", requests,
                           ok, requests - ok, a.concurrency, a.lockstep ? ", lock-step" : "",
                           a.tp > 1 ? fmt::format(", {} tensor-parallel ranks", a.tp) : "");
  std::cerr << fmt::format("tokens: {} in {:.3f} s wall, {:.1f} tokens/s{} | model load {:.2f} s\n",
                           tokens, wall, wall > 0 ? double(tokens) / wall : 0.0, sim, load);
  std::string busy;
  for (const auto& [name, f] : st.busy_fraction)
    busy += fmt::format("{}{} {:.1f}%", busy.empty() ? "" : ", ", name, 100.0 * f);
  std::cerr << fmt::format("busy: {}{}\n", busy.empty() ? "(no work recorded)" : busy, sim);
  std::cerr << fmt::format("full tier ({}): {:.2f} MiB read, {:.2f} MiB written\n", a.full_tier,
                           double(st.full_tier_bytes_read) / (1 << 20),
                           double(st.full_tier_bytes_written) / (1 << 20));
  if (!placement.empty()) {
    size_t bound = 0;
    for (const auto& l : placement) bound += l.applied ? 1 : 0;
    std::cerr << fmt::format("placement: {} of {} bound as planned (actors' threads, full tiers' "
                             "memory; --log-level info: where)\n",
                             bound, placement.size());
  }
}

int run_batch(const BatchArgs& a) {
  using clock = std::chrono::steady_clock;
  check_ngram_sizes(a.line_defaults);
  std::vector<BatchLine> lines = read_lines(a.input, a.line_defaults);
  // A bad --row-costs file fails before the output is touched or the model loads.
  const auto row_costs =
      a.row_costs.empty() ? std::vector<std::pair<double, double>>{} : load_row_costs(a.row_costs);
  std::ofstream out(a.output, std::ios::binary | std::ios::trunc);
  if (!out) throw Error("--output '" + a.output + "': cannot open for writing");
  if (!a.trace.empty()) {  // an unwritable trace path fails now, not after the work
    std::ofstream probe(a.trace, std::ios::binary | std::ios::trunc);
    if (!probe) throw Error("--trace '" + a.trace + "': cannot open for writing");
  }

  vericache::EngineConfig cfg;
  cfg.model_dir = a.model_dir;
  cfg.threads = a.threads;
  cfg.device = a.device;
  cfg.tp = a.tp;
  cfg.full_tier = a.full_tier;
  cfg.disk_dir = a.disk_dir;
  if (!a.disk_dir.empty() && a.full_tier != "disk")  // said so, as generate does
    spdlog::warn("--disk-dir is not used without --full-tier disk");
  cfg.link_bytes_per_second = a.link_gbps * 1e9;
  cfg.kv_dtype = a.kv_dtype;
  cfg.max_active = a.concurrency;
  cfg.verify_batch = a.verify_batch;
  cfg.max_queue = cfg.max_active + (a.max_queue > 0 ? a.max_queue : std::max<size_t>(1, lines.size()));
  cfg.lockstep = a.lockstep;
  cfg.slice_prefill = !a.whole_prefill;
  cfg.prefill_chunk = a.prefill_chunk;
  cfg.fast_memory_bytes = parse_bytes("--fast-memory", a.fast_memory);
  cfg.gpu_memory_utilization = a.gpu_memory_utilization;
  cfg.full_tier_bytes = parse_bytes("--full-tier-budget", a.full_tier_budget);
  cfg.stage_positions = a.stage_positions;
  cfg.block_tokens = a.block_tokens;
  cfg.trace = !a.trace.empty();
  apply_remote_options(a.remote, a.block_tokens, cfg);
  cfg.placement = a.placement;

  spdlog::info("loading model from {}", a.model_dir);
  const auto load_start = clock::now();
  std::optional<vericache::Engine> engine;
  try {
    engine.emplace(cfg);
  } catch (const std::exception& e) {
    throw Error(engine_error_with_flags(e.what(), "--concurrency"));
  }
  log_placement(*engine);
  {
    // Every line is checked before any runs, with generate's checks and the model's limits.
    const ModelConfig mc = load_model_config(std::filesystem::path(a.model_dir) / "config.json");
    const Tokenizer tok =
        Tokenizer::from_file(std::filesystem::path(a.model_dir) / "tokenizer.json");
    for (BatchLine& b : lines) validate(b, RequestLimits::of(mc), tok);
  }
  const auto start = clock::now();
  const double load = std::chrono::duration<double>(start - load_start).count();

  // At most max_active + --max-queue requests are in the engine at once: an offline
  // batch waits for room instead of having lines answered "overloaded". The engine's
  // own queue holds the whole window (cfg.max_queue, above): when the memory budget
  // runs fewer than max_active, the rest of the window waits in it.
  const size_t window = cfg.max_queue;
  std::vector<std::optional<vericache::Engine::Submission>> subs(lines.size());
  size_t ok = 0, tokens = 0, written = 0, in_flight = 0;
  auto write_next = [&] {
    const size_t i = written++;
    json j;
    if (!subs[i]) {
      j = {{"id", lines[i].id}, {"error", lines[i].error}, {"finish_reason", "error"}};
    } else {
      const vericache::Result r = subs[i]->result.get();
      --in_flight;
      j = result_json(lines[i], r, a);
      if (r.ok) {
        ++ok;
        tokens += r.output_ids.size();
      }
    }
    if (j.contains("error")) spdlog::warn("{}", j["error"].get<std::string>());
    out << j.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
    out.flush();
  };
  for (size_t i = 0; i < lines.size(); ++i) {
    if (!lines[i].error.empty()) continue;
    lines[i].req.row_costs = row_costs;
    while (in_flight >= window) write_next();
    subs[i] = engine->submit(lines[i].req);
    ++in_flight;
  }
  while (written < lines.size()) write_next();
  const double wall = std::chrono::duration<double>(clock::now() - start).count();
  if (!out) throw Error("--output '" + a.output + "': writing failed");

  const vericache::EngineStats st = engine->stats();
  if (!a.trace.empty()) {
    try {
      engine->write_trace(a.trace);
    } catch (const std::exception& e) {
      throw Error("--trace '" + a.trace + "': " + e.what());
    }
  }
  print_summary(a, lines.size(), ok, tokens, wall, load, st, engine->placement());
  return 0;
}

}  // namespace

void add_batch_command(CLI::App& app, Runner& run) {
  auto a = std::make_shared<BatchArgs>();
  CLI::App* cmd = app.add_subcommand(
      "batch", "Run a JSONL file of requests through the engine, many at once");
  cmd->add_option("--input", a->input, "Requests, one JSON object per line")->required();
  cmd->add_option("--output", a->output, "Results, one JSON object per line, in input order")
      ->required();
  cmd->add_option("--concurrency", a->concurrency, "Requests in flight at once (max_active)")
      ->capture_default_str()->check(integer_in(1, 4096));
  cmd->add_option("--verify-batch", a->verify_batch,
                  "Requests whose verify passes may share one forward pass (EngineConfig::verify_batch)")
      ->capture_default_str()->check(integer_in(1, 64));
  cmd->add_option("--model", a->model_dir, "Model directory (Hugging Face layout)")
      ->capture_default_str();
  cmd->add_option("--full-tier", a->full_tier, "Where the full KV lives")
      ->capture_default_str()->check(CLI::IsMember({"host", "disk"}));
  cmd->add_option("--disk-dir", a->disk_dir, "Directory of the disk tier (default: a temp dir)");
  cmd->add_option("--fast-memory", a->fast_memory,
                  "Fast-memory budget for all KV in fast memory, e.g. 256M (0 = 65,536 tokens "
                  "of full KV on the CPU; on a GPU, its free memory: --gpu-memory-utilization); "
                  "requests wait until their bound fits")
      ->capture_default_str()->check(bytes_value());
  cmd->add_option("--full-tier-budget", a->full_tier_budget,
                  "Budget of the full tier (host memory or disk), e.g. 4G (0 = unlimited)")
      ->capture_default_str()->check(bytes_value());
  cmd->add_option("--stage-positions", a->stage_positions,
                  "KV positions per staged chunk of the full KV (0 = whole layers)")
      ->capture_default_str()->check(integer_in(0, int64_t(1) << 24));
  cmd->add_option("--row-costs", a->row_costs,
                  "Requests with draft auto weigh verify passes with this measured row-cost "
                  "curve (the JSON of `vericache bench rows --json`)");
  add_draft_hierarchy_options(*cmd, a->line_defaults);
  add_block_tokens_option(*cmd, a->block_tokens);
  add_device_option(*cmd, a->device);
  add_gpu_memory_option(*cmd, a->gpu_memory_utilization);
  add_remote_options(*cmd, a->remote);
  cmd->add_option("--link-gbps", a->link_gbps,
                  "Modelled link bandwidth to the full tier in GB/s (0 = unthrottled)")
      ->capture_default_str()->check(number_in(0.0));
  cmd->add_flag("--lockstep", a->lockstep,
                "Everyone drafts, then everyone verifies (for comparison)");
  cmd->add_flag("--whole-prefill", a->whole_prefill, kWholePrefillHelp);
  add_prefill_chunk_option(*cmd, a->prefill_chunk);
  cmd->add_option("--trace", a->trace, "Write a Chrome trace-event JSON file");
  cmd->add_option("--threads", a->threads, "Worker threads per compute actor (0 = auto)")
      ->capture_default_str()->check(integer_in(0, 1024));
  cmd->add_option("--tp", a->tp,
                  "Tensor-parallel degree: the engine's drafter, verifier and mover each drive this many "
                  "ranks (threads) over shards of the model, KV sharded by KV heads; --threads, "
                  "--fast-memory and --full-tier-budget are then per rank")
      ->capture_default_str()->check(integer_in(1, 64));
  add_placement_option(*cmd, a->placement);
  cmd->add_option("--max-queue", a->max_queue,
                  "Lines in the engine beyond --concurrency at most (waiting, or running when "
                  "the memory budget admits fewer); more lines wait their turn (default: every line)")
      ->check(integer_in(1));
  cmd->add_option("--kv-dtype", a->kv_dtype, "KV cache storage")->capture_default_str()
      ->check(CLI::IsMember({"bf16", "f32"}));
  cmd->callback([&run, a] { run = [a] { return run_batch(*a); }; });
}

}  // namespace vc::cli
