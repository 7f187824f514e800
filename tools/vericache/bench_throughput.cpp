// `vericache bench throughput`: tokens/s of five ways to serve the same requests at
// an EQUAL fast-memory budget for KV (a byte cap standing for GPU HBM), since that
// budget is what bounds concurrency in real serving:
//   (a) full-KV decoding, KV in fast memory: as many requests as their full KV fits;
//   (b) full-KV decoding, KV behind the link: every token streams the whole KV
//       (draft length 0: one verify pass per token);
//   (c) lossy decoding over compressed views: as many requests as the views fit;
//   (d) VeriCache lock-step: everyone drafts, then everyone verifies;
//   (e) VeriCache staggered: drafting and verifying overlap across requests.
// Disk rows put the full KV on the real disk (O_DIRECT, no throttling): (e) by
// default, (b) when chosen. --configs picks the rows (a b c d e b-disk e-disk).
// With --draft-hierarchy ngram, (d) and (e) run once more with the n-gram level in
// front of the drafter, beside the rows without it.
// The link is modelled (no GPU here): the mover's reads are throttled to the
// machine's measured memory bandwidth divided by the HBM:link ratio of the modelled
// deployment (H200 HBM 4.8 TB/s against PCIe Gen5 x16 ~55 GB/s by default); every
// figure that depends on it is labelled "simulated". Disk-tier figures (a real
// disk, no throttling) are reported separately.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <random>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <vericache/engine.hpp>

#include "kvtiers/compressor.hpp"
#include "runtime/fast_memory_need.hpp"
#include "runtime/model.hpp"
#include "runtime/model/tokenizer.hpp"
#include "runtime/request_validation.hpp"
#include "runtime/tp_comm.hpp"
#include "tools/vericache/bench_prompts.hpp"
#include "tools/vericache/commands.hpp"
#include "tools/vericache/options.hpp"
#include "tools/vericache/placement_option.hpp"
#include "tools/vericache/membw.hpp"

namespace vc::cli {

namespace {

struct ThroughputArgs {
  std::string model_dir = default_model_dir();
  std::vector<size_t> contexts = {1024, 4096};
  size_t base_requests = 4;  // (a)'s concurrency: the budget is sized to hold this many
  int gen_tokens = 64;
  // --compressor: several names run every row that drafts or decodes over a view
  // ((c), (d), (e)) once per compressor, side by side under the same budget
  std::vector<std::string> compressors = {"snapkv"};
  double ratio = 4.0;
  std::string draft = "30";
  double hbm_gbps = 4800, link_gbps = 55;
  size_t fold_every = 64;
  RequestInput hierarchy;  // --draft-hierarchy and the n-gram options (vericache requests)
  std::string prompt_kind = "random";  // random tokens, or the bundled code prompts (plain, edit)
  bool disk = true;
  std::string disk_dir;  // --disk-dir: where the disk rows' tier lives ("" = $TMPDIR or /tmp)
  // --configs: the rows to run, by key; empty = a b c d e (+ e-disk unless --no-disk)
  std::vector<std::string> configs;
  bool json = false;
  int tp = 1;  // --tp: EngineConfig::tp of every configuration's engine
  // --verify-batch: EngineConfig::verify_batch; several values: each vericache row
  // once per value, side by side
  std::vector<size_t> verify_batches = {vericache::EngineConfig{}.verify_batch};
  int threads = 0;  // --threads: EngineConfig::threads (per compute actor, per rank)
  std::string placement = "none";  // --placement: EngineConfig::placement of every engine
  std::string device = "cpu";      // --device: EngineConfig::device of every engine
};

struct Config {
  std::string key;  // what --configs names it
  std::string label, mode, draft;
  size_t concurrency;
  bool lockstep, simulated, disk;
  std::string hierarchy = "none";  // the draft hierarchy of vericache requests
  size_t verify_batch = 1;          // EngineConfig::verify_batch
  std::string compressor = "";      // of the requests' views; empty for rows without one
};

struct Outcome {
  double tokens_per_second = 0;
  size_t tokens = 0;
  double seconds = 0;
  std::map<std::string, double> busy;         // over the engine's life (prefills included)
  std::map<std::string, double> busy_decode;  // over the decode window (tok/s's window)
  double tokens_per_round = 0;
  double requests_per_pass = 0;  // mean requests sharing a verify pass, over rounds
  bool all_ok = true;
  std::string error;  // the first failed request's error ("" when all_ok)
  size_t fast_peak = 0;
  size_t device_bytes = 0;  // held by the model's device backends at the end (0 on the CPU)
};

std::vector<int32_t> prompt_of(size_t n, int vocab, int bos, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(0, vocab - 3);
  std::vector<int32_t> ids(n);
  for (auto& t : ids) t = d(rng);
  ids[0] = bos;
  return ids;
}

// Runs `c` on fresh engine; decode throughput is measured over the window after
// the last request produced its first token and finished its prefill (views
// built), so prefill cost (the same in every configuration) does not blur the
// comparison.
Outcome run_config(const ThroughputArgs& a, const Config& c, size_t ctx, double link_bps,
                   const ModelConfig& mc, const Tokenizer& tok, size_t budget) {
  vericache::EngineConfig ec;
  ec.model_dir = a.model_dir;
  ec.tp = a.tp;
  ec.threads = a.threads;
  ec.placement = a.placement;
  ec.device = a.device;
  ec.max_active = c.concurrency;
  ec.verify_batch = c.verify_batch;
  ec.max_queue = c.concurrency;
  ec.lockstep = c.lockstep;
  ec.link_bytes_per_second = c.simulated ? link_bps : 0;
  ec.full_tier = c.disk ? "disk" : "host";
  if (c.disk) ec.disk_dir = a.disk_dir;
  ec.fast_memory_bytes = budget;  // enforced: blocks, views and staging are charged to it
  ec.trace = false;
  vericache::Engine engine(ec);
  using clock = std::chrono::steady_clock;
  std::mutex mu;
  std::vector<clock::time_point> first(c.concurrency), submitted(c.concurrency), stamps;
  std::vector<bool> has_first(c.concurrency, false);
  std::vector<vericache::Engine::Submission> subs;
  for (size_t i = 0; i < c.concurrency; ++i) {
    vericache::Request r;
    r.prompt_ids = a.prompt_kind == "random"
                       ? prompt_of(ctx, mc.vocab_size, mc.bos_token_id, uint32_t(i + 1))
                       : code_prompt(tok, ctx, uint32_t(i + 1), a.prompt_kind);
    r.max_tokens = a.gen_tokens;
    r.mode = c.mode;
    r.compressor = c.compressor.empty() ? a.compressors.front() : c.compressor;
    r.ratio = a.ratio;
    r.draft = c.draft;
    r.fold_every = a.fold_every;
    r.draft_hierarchy = c.hierarchy;
    r.ngram_min = size_t(a.hierarchy.ngram_min);
    r.ngram_max = size_t(a.hierarchy.ngram_max);
    r.ngram_proposal = size_t(a.hierarchy.ngram_proposal);
    r.ignore_eos = true;
    submitted[i] = clock::now();
    subs.push_back(engine.submit(r, [&, i](uint64_t, int32_t) {
      std::lock_guard<std::mutex> lock(mu);
      const auto now = clock::now();
      if (!has_first[i]) {
        has_first[i] = true;
        first[i] = now;
      } else {
        stamps.push_back(now);
      }
    }));
  }
  Outcome o;
  size_t rounds = 0, emitted = 0, pass_requests = 0;
  // The window begins once every request has its first token and its prefill is
  // through (the first token goes out before the view is built).
  auto start = *std::max_element(first.begin(), first.end());
  for (size_t i = 0; i < subs.size(); ++i) {
    const auto r = subs[i].result.get();
    start = std::max(start, submitted[i] + std::chrono::duration_cast<clock::duration>(
                                               std::chrono::duration<double>(r.stats.prefilled_after_seconds)));
    if (!r.ok && o.all_ok) o.error = r.error;
    o.all_ok = o.all_ok && r.ok;
    rounds += r.stats.rounds;
    pass_requests += r.stats.verify_pass_requests;
    emitted += r.output_ids.size() > 0 ? r.output_ids.size() - 1 : 0;
  }
  size_t n = 0;
  clock::time_point end = start;
  for (const auto& t : stamps)
    if (t > start) {
      ++n;
      end = std::max(end, t);
    }
  o.tokens = n;
  o.seconds = std::chrono::duration<double>(end - start).count();
  o.tokens_per_second = o.seconds > 0 ? double(n) / o.seconds : 0;
  const auto es = engine.stats();
  o.busy = es.busy_fraction;
  o.busy_decode = engine.busy_fraction(start, end);
  o.fast_peak = es.fast_memory_peak;
  o.device_bytes = es.device_bytes;
  o.tokens_per_round = rounds ? double(emitted) / double(rounds) : 0;
  o.requests_per_pass = rounds ? double(pass_requests) / double(rounds) : 0;
  return o;
}

int run_throughput(const ThroughputArgs& a) {
  check_ngram_sizes(a.hierarchy);
  for (const std::string& k : a.configs)
    if (!a.disk && (k == "e-disk" || k == "b-disk"))
      throw Error("--no-disk skips the disk-tier rows, but --configs names " + k);
  if (!a.disk_dir.empty()) {
    if (!a.disk) throw Error("--disk-dir places the disk-tier rows, but --no-disk skips them");
    const bool disk_row = a.configs.empty() || std::any_of(a.configs.begin(), a.configs.end(),
                                                            [](const std::string& k) {
                                                              return k == "e-disk" || k == "b-disk";
                                                            });
    if (!disk_row) spdlog::warn("--disk-dir is not used: --configs names no disk-tier row");
  }
  const auto model = Model::load(a.model_dir);
  if (a.device != "cpu") {  // an unusable device fails before any work
    if (a.tp > 1) throw Error("--device " + a.device + ": --tp runs its ranks on the CPU only (for now)");
    (void)Model::on_device(model, parse_device(a.device));
  }
  const ModelConfig& mc = model->config();
  const Tokenizer tok = Tokenizer::from_file(std::filesystem::path(a.model_dir) / "tokenizer.json");
  if (a.prompt_kind != "random")  // a context too short for the prompt kind fails before any work
    for (size_t ctx : a.contexts) (void)code_prompt(tok, ctx, 1, a.prompt_kind);
  for (const auto& name : a.compressors)
    (void)make_compressor(name);  // an unknown name fails before any work
  // At --tp > 1 budgets and needs are per rank: a rank's KV layout (its KV heads).
  std::shared_ptr<const Model> rank_model = model;
  if (a.tp > 1) {
    try {
      rank_model = Model::shard(model, 0, std::make_shared<CpuCommunicator>(a.tp));
    } catch (const std::exception& e) {
      throw Error(std::string("--tp: ") + e.what());
    }
  }
  for (size_t ctx : a.contexts)
    mc.require_context(ctx + size_t(a.gen_tokens),
                       fmt::format("--contexts: {} + --gen-tokens {}", ctx, a.gen_tokens));
  const double ram_bps = measure_read_bandwidth();
  const double link_bps = ram_bps * a.link_gbps / a.hbm_gbps;
  nlohmann::json rows = nlohmann::json::array();
  for (size_t ctx : a.contexts) {
    // The budget holds base_requests full-KV requests (as admission counts them)
    // plus the engine's staging; every configuration runs as many requests as
    // admission by memory lets in at once under it.
    const KvCacheConfig kv = rank_model->kv_config(16, DType::bf16);
    auto need = [&](const std::string& mode, const std::string& draft, const std::string& compressor) {
      DraftSpec s;
      s.prompt.assign(ctx, 0);
      s.mode = parse_decode_mode(mode);
      s.compressor = compressor;
      s.ratio = a.ratio;
      s.max_new_tokens = size_t(a.gen_tokens);
      s.fold_every = a.fold_every;
      return fast_memory_need(s, kv, draft == "auto" ? 64 : std::stoul(draft)).total();
    };
    // Staging for the most verify lanes any row uses: every row gets the same budget.
    const size_t lanes = *std::max_element(a.verify_batches.begin(), a.verify_batches.end());
    const size_t overhead = engine_fast_overhead(kv, 1024, lanes);
    const size_t budget = a.base_requests * need("full", "0", "") + overhead;  // no view
    auto fit = [&](const std::string& mode, const std::string& draft, const std::string& compressor) {
      return std::max<size_t>(1, (budget - overhead) / need(mode, draft, compressor));
    };
    // Rows without a view ((a), (b)) once; rows over a view once per compressor.
    std::vector<Config> all = {
        {"a", "(a) full KV in fast memory", "full", "0", a.base_requests, false, false, false},
        {"b", "(b) full KV behind the link", "vericache", "0", a.base_requests, false, true, false}};
    std::vector<Config> disk_rows = {
        {"b-disk", "(b) full KV on disk", "vericache", "0", a.base_requests, false, false, true}};
    for (const auto& comp : a.compressors) {
      const size_t n_fit = fit("vericache", a.draft, comp);
      std::vector<Config> viewed = {
          {"c", "(c) lossy (compressed only)", "lossy", "0", fit("lossy", "0", comp), false, false, false},
          {"d", "(d) VeriCache lock-step", "vericache", a.draft, n_fit, true, true, false},
          {"e", "(e) VeriCache staggered", "vericache", a.draft, n_fit, false, true, false}};
      if (a.hierarchy.draft_hierarchy == "ngram") {
        viewed.push_back({"d", "(d) lock-step + n-gram", "vericache", a.draft, n_fit, true, true, false, "ngram"});
        viewed.push_back({"e", "(e) staggered + n-gram", "vericache", a.draft, n_fit, false, true, false, "ngram"});
      }
      viewed.push_back({"e-disk", "(e) staggered, disk tier", "vericache", a.draft, n_fit, false, false, true});
      for (auto& c : viewed) {
        c.compressor = comp;
        if (a.compressors.size() > 1) c.label += " [" + comp + "]";
        (c.disk ? disk_rows : all).push_back(c);
      }
    }
    all.insert(all.end(), disk_rows.begin(), disk_rows.end());
    std::vector<Config> configs;
    for (const auto& c : all) {
      const bool chosen = a.configs.empty()
                              ? c.key != "b-disk" && (c.key != "e-disk" || a.disk)
                              : std::find(a.configs.begin(), a.configs.end(), c.key) != a.configs.end();
      if (!chosen) continue;
      if (c.mode != "vericache") {  // nothing to verify: one row
        configs.push_back(c);
        continue;
      }
      for (size_t vb : a.verify_batches) {
        Config v = c;
        v.verify_batch = vb;
        if (a.verify_batches.size() > 1) v.label += fmt::format(" [vb {}]", vb);
        configs.push_back(v);
      }
    }
    double base = 0;
    for (const auto& c : configs) {
      spdlog::info("context {}: {} x{}", ctx, c.label, c.concurrency);
      const Outcome o = run_config(a, c, ctx, link_bps, mc, tok, budget);
      if (c.key == "a") base = o.tokens_per_second;
      nlohmann::json busy = o.busy;
      nlohmann::json busy_decode = o.busy_decode;
      rows.push_back({{"context", ctx},
                      {"tensor_parallel", a.tp},
                      {"threads", a.threads},
                      {"device", a.device},
                      {"config", c.label},
                      {"compressor", c.compressor},
                      {"concurrency", c.concurrency},
                      {"verify_batch", c.mode == "vericache" ? c.verify_batch : size_t(0)},
                      {"fast_budget_bytes", budget},
                      {"fast_peak_bytes", o.fast_peak},
                      {"device_bytes", o.device_bytes},
                      {"tokens_per_second", o.tokens_per_second},
                      {"vs_a", base > 0 ? o.tokens_per_second / base : 0.0},
                      {"tokens_per_round", o.tokens_per_round},
                      {"verify_requests_per_pass", o.requests_per_pass},
                      {"busy_fraction", busy},
                      {"busy_fraction_decode", busy_decode},
                      {"simulated_link", c.simulated},
                      {"disk_tier", c.disk},
                      {"draft_hierarchy", c.mode == "vericache" && c.draft != "0" ? c.hierarchy : "none"},
                      {"all_ok", o.all_ok},
                      {"error", o.error}});
      if (!o.all_ok) spdlog::error("context {}: {}: {}", ctx, c.label, o.error);
    }
  }
  if (a.json) {
    std::cout << nlohmann::json{{"ram_read_gb_per_second", ram_bps / 1e9},
                                {"prompt_kind", a.prompt_kind},
                                {"simulated_link_gb_per_second", link_bps / 1e9},
                                {"modelled_hbm_gb_per_second", a.hbm_gbps},
                                {"modelled_link_gb_per_second", a.link_gbps},
                                {"verify_batch", a.verify_batches},
                                {"rows", rows}}
                     .dump(2)
              << "\n";
    return 0;
  }
  std::cout << fmt::format(
      "bench throughput: {} ({}x, draft {}, verify batch {}), {} tokens per request, {} prompts, {}{}equal fast-memory budget "
      "= {} full-KV requests + staging, ENFORCED (blocks, views and staging buffers are charged "
      "to it; requests are admitted by memory)\nfast memory: this machine's RAM, {:.1f} GB/s read; link: "
      "SIMULATED at {:.2f} GB/s (RAM / {:.0f}, the ratio of {:.0f} GB/s HBM to {:.0f} GB/s "
      "PCIe)\n\n",
      fmt::join(a.compressors, "/"), a.ratio, a.draft, fmt::join(a.verify_batches, "/"), a.gen_tokens,
      a.prompt_kind == "random" ? std::string("random-token") : "code (" + a.prompt_kind + ")",
      a.tp > 1 ? fmt::format("{} tensor-parallel ranks, budget PER RANK: ", a.tp) : "",
      a.device == "cpu" ? std::string() : "weight products on " + a.device + ", ",
      a.base_requests, ram_bps / 1e9,
      link_bps / 1e9, a.hbm_gbps / a.link_gbps, a.hbm_gbps, a.link_gbps);
  std::cout << fmt::format("{:>7} {:<36} {:>4} {:>9} {:>7} {:>8} {:>8} {:>8} {:>8} {:>8} {:>13}  {}\n",
                           "context", "configuration", "reqs", "tok/s", "vs (a)", "tok/rnd", "req/pass",
                           "drafter", "mover", "verifier", "fast peak MB", "link");
  for (const auto& r : rows) {
    auto busy = [&](const char* k) {
      const auto& b = r["busy_fraction_decode"];
      return b.contains(k) ? fmt::format("{:.0f}%", 100 * b[k].get<double>()) : std::string("-");
    };
    // One decimal below 100 tokens/s (real shapes on a CPU run at a few tokens/s).
    const double tps = r["tokens_per_second"].get<double>();
    const std::string tps_text = tps < 100 ? fmt::format("{:.1f}", tps) : fmt::format("{:.0f}", tps);
    // Without row (a) in the run there is nothing to compare with ("vs_a" 0 in JSON).
    const double vs_a = r["vs_a"].get<double>();
    std::cout << fmt::format("{:>7} {:<36} {:>4} {:>9} {:>7} {:>8.1f} {:>8.2f} {:>8} {:>8} {:>8} {:>6.1f} of {:<4.1f}  {}\n",
                             r["context"].get<size_t>(), r["config"].get<std::string>(),
                             r["concurrency"].get<size_t>(), tps_text,
                             vs_a > 0 ? fmt::format("{:.2f}x", vs_a) : std::string("-"), r["tokens_per_round"].get<double>(),
                             r["verify_requests_per_pass"].get<double>(),
                             busy("drafter"), busy("mover"), busy("verifier"),
                             r["fast_peak_bytes"].get<size_t>() / 1e6,
                             r["fast_budget_bytes"].get<size_t>() / 1e6,
                             r["disk_tier"].get<bool>() ? "disk (real)"
                             : r["simulated_link"].get<bool>() ? "simulated"
                                                               : "-");
  }
  if (a.device != "cpu") {  // what HBM held beside the budget: weights, copies of the KV
    std::cout << "\ndevice memory held at the end of each row (weights, the KV cache's and views' copies, buffers):";
    for (const auto& r : rows)
      std::cout << fmt::format(" {} {:.1f} MB;", r["config"].get<std::string>(),
                               double(r["device_bytes"].get<size_t>()) / 1e6);
    std::cout << "\n";
  }
  for (const auto& r : rows)
    if (!r["all_ok"].get<bool>())
      std::cout << fmt::format("FAILED {} {}: {}\n", r["context"].get<size_t>(),
                               r["config"].get<std::string>(), r["error"].get<std::string>());
  std::cout << "\ntok/s: decode tokens/s over all requests once every request has its first "
               "token; req/pass: requests sharing a verify pass, mean over rounds; busy: share of "
               "that decode window (prefills done; JSON busy_fraction: the engine's lifetime, "
               "prefill included).\n";
  return 0;
}

}  // namespace

void add_bench_throughput_command(CLI::App& bench, Runner& run) {
  auto a = std::make_shared<ThroughputArgs>();
  CLI::App* cmd = bench.add_subcommand("throughput", "Serving throughput at an equal fast-memory budget");
  cmd->add_option("--model", a->model_dir, "Model directory")->capture_default_str();
  cmd->add_option("--contexts", a->contexts, "Prompt lengths")->capture_default_str()
      ->check(integer_in(1));
  cmd->add_option("--base-requests", a->base_requests,
                  "Requests whose full KV the budget holds (sets the budget)")->capture_default_str()
      ->check(integer_in(1, 4096));
  cmd->add_option("--gen-tokens", a->gen_tokens, "Tokens per request")->capture_default_str()
      ->check(integer_in(1, 1 << 20));
  cmd->add_option("--compressor", a->compressors,
                  "Compressors of the views; several run rows (c), (d) and (e) once per compressor, "
                  "side by side (see `vericache compressors`)")
      ->capture_default_str();
  cmd->add_option("--ratio", a->ratio)->capture_default_str()->check(number_in(1.0, kMaxRatio));
  cmd->add_option("--draft", a->draft, "Draft length or auto")->capture_default_str()
      ->check(draft_value());
  cmd->add_option("--hbm-gbps", a->hbm_gbps, "Modelled fast-memory bandwidth")->capture_default_str()
      ->check(number_in(0.0, 1e9, /*lo_open=*/true));
  cmd->add_option("--link-gbps", a->link_gbps, "Modelled link bandwidth")->capture_default_str()
      ->check(number_in(0.0, 1e9, /*lo_open=*/true));
  add_draft_hierarchy_options(*cmd, a->hierarchy);
  cmd->add_option("--prompt-kind", a->prompt_kind,
                  "random: random tokens; plain: the bundled code prompts concatenated; edit: "
                  "the same ending in a request to write the first file out again (the answer "
                  "repeats the context)")
      ->capture_default_str()->check(CLI::IsMember({"random", "plain", "edit"}));
  cmd->add_option("--fold-every", a->fold_every, "Rebuild views every N verified tokens")
      ->capture_default_str()->check(integer_in(0, int64_t(1) << 30));
  cmd->add_flag("!--no-disk", a->disk, "Skip the disk-tier row");
  cmd->add_option("--disk-dir", a->disk_dir,
                  "Directory of the disk rows' full tier, created if missing (default: $TMPDIR "
                  "or /tmp); put it on the disk to measure");
  cmd->add_option("--configs", a->configs,
                  "Rows to run: a b c d e b-disk e-disk (default: a b c d e e-disk; b-disk and "
                  "e-disk keep the full KV on the real disk, O_DIRECT, no throttling)")
      ->check(CLI::IsMember({"a", "b", "c", "d", "e", "b-disk", "e-disk"}));
  cmd->add_flag("--json", a->json, "Print JSON");
  cmd->add_option("--tp", a->tp,
                  "Tensor-parallel degree of every engine (budgets are then per rank)")
      ->capture_default_str()->check(integer_in(1, 64));
  add_placement_option(*cmd, a->placement);
  cmd->add_option("--verify-batch", a->verify_batches,
                  "Requests whose verify passes may share one forward pass (EngineConfig::verify_batch); "
                  "several values run every vericache row once per value")
      ->capture_default_str()->check(integer_in(1, 64));
  cmd->add_option("--threads", a->threads,
                  "Worker threads per compute actor, per rank (0 = auto: the cores split "
                  "between the ranks)")
      ->capture_default_str()->check(integer_in(0, 1024));
  add_device_option(*cmd, a->device);
  cmd->callback([&run, a] { run = [a] { return run_throughput(*a); }; });
}

}  // namespace vc::cli
