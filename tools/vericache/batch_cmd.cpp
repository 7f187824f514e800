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
#include <limits>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <vericache/engine.hpp>

#include "kernels/error.hpp"
#include "tools/vericache/commands.hpp"

namespace vc::cli {

namespace {

using nlohmann::json;

struct BatchArgs {
  std::string input;
  std::string output;
  size_t concurrency = 8;
  std::string model_dir = default_model_dir();
  std::string full_tier = "host";
  std::string disk_dir;
  double link_gbps = 0;
  bool lockstep = false;
  std::string trace;
  int threads = 0;
  size_t max_queue = 0;  // 0 = the number of lines
  std::string kv_dtype = "bf16";
};

/// One input line, parsed: the request, or why it could not be made.
struct BatchLine {
  size_t line = 0;
  json id;
  vericache::Request req;
  bool logprobs = false;
  std::string error;
};

// 9 significant digits, exactly as `generate --json --logprobs` prints them.
double nine_digits(float v) { return std::stod(fmt::format("{:.9g}", v)); }

std::string shown(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return std::string(v.type_name()) + " " + s;
}

[[noreturn]] void bad_field(const std::string& key, const std::string& expected, const json& v) {
  throw Error("field '" + key + "': expected " + expected + ", got " + shown(v));
}

int64_t as_int64(const std::string& key, const json& v, const std::string& expected) {
  if (!v.is_number_integer()) bad_field(key, expected, v);
  if (v.is_number_unsigned()) {
    const auto u = v.get<uint64_t>();
    if (u > uint64_t(std::numeric_limits<int64_t>::max())) bad_field(key, expected, v);
    return int64_t(u);
  }
  return v.get<int64_t>();
}

int as_int(const std::string& key, const json& v) {
  const int64_t x = as_int64(key, v, "an integer");
  if (x < std::numeric_limits<int>::min() || x > std::numeric_limits<int>::max())
    bad_field(key, "an integer in the int range", v);
  return int(x);
}

double as_number(const std::string& key, const json& v) {
  if (!v.is_number()) bad_field(key, "a number", v);
  return v.get<double>();
}

std::string as_string(const std::string& key, const json& v) {
  if (!v.is_string()) bad_field(key, "a string", v);
  return v.get<std::string>();
}

bool as_bool(const std::string& key, const json& v) {
  if (!v.is_boolean()) bad_field(key, "true or false", v);
  return v.get<bool>();
}

void apply_field(const std::string& key, const json& v, BatchLine& b) {
  vericache::Request& r = b.req;
  if (key == "id") {
    if (!v.is_string() && !v.is_number()) bad_field(key, "a string or a number", v);
    b.id = v;
  } else if (key == "prompt") {
    r.prompt = as_string(key, v);
  } else if (key == "prompt_ids") {
    if (!v.is_array()) bad_field(key, "an array of token ids", v);
    for (const json& t : v) {
      if (!t.is_number_integer()) bad_field(key, "an array of token ids (integers)", t);
      const int64_t x = as_int64(key, t, "a token id");
      if (x < 0 || x > std::numeric_limits<int32_t>::max()) bad_field(key, "a token id >= 0", t);
      r.prompt_ids.push_back(int32_t(x));
    }
  } else if (key == "max_tokens") {
    r.max_tokens = as_int(key, v);
  } else if (key == "mode") {
    r.mode = as_string(key, v);
    if (r.mode != "full" && r.mode != "lossy" && r.mode != "vericache")
      bad_field(key, "\"full\", \"lossy\" or \"vericache\"", v);
  } else if (key == "compressor") {
    r.compressor = as_string(key, v);
  } else if (key == "compressor_params") {
    if (!v.is_object()) bad_field(key, "an object of parameter names to numbers", v);
    for (const auto& [name, value] : v.items()) r.compressor_params.emplace_back(name, as_number(key, value));
  } else if (key == "ratio") {
    r.ratio = as_number(key, v);
  } else if (key == "draft") {
    if (v.is_number_integer())
      r.draft = std::to_string(as_int64(key, v, "a length or \"auto\""));
    else if (v.is_string())
      r.draft = v.get<std::string>();
    else
      bad_field(key, "a length or \"auto\"", v);
  } else if (key == "temperature") {
    r.temperature = float(as_number(key, v));
  } else if (key == "top_k") {
    r.top_k = as_int(key, v);
  } else if (key == "top_p") {
    r.top_p = float(as_number(key, v));
  } else if (key == "seed") {
    if (!v.is_number_integer() || (!v.is_number_unsigned() && v.get<int64_t>() < 0))
      bad_field(key, "an integer >= 0", v);
    r.seed = v.get<uint64_t>();
  } else if (key == "stop") {
    if (v.is_string()) {
      r.stop = {v.get<std::string>()};
    } else if (v.is_array()) {
      for (const json& s : v) {
        if (!s.is_string()) bad_field(key, "a string or an array of strings", s);
        r.stop.push_back(s.get<std::string>());
      }
    } else {
      bad_field(key, "a string or an array of strings", v);
    }
  } else if (key == "ignore_eos") {
    r.ignore_eos = as_bool(key, v);
  } else if (key == "logprobs") {
    b.logprobs = as_bool(key, v);
  } else {
    throw Error("unknown field '" + key +
                "' (known: id, prompt, prompt_ids, max_tokens, mode, compressor, ratio, draft, "
                "temperature, top_k, top_p, seed, stop, ignore_eos, logprobs)");
  }
}

BatchLine parse_line(const std::string& text, size_t line) {
  BatchLine b;
  b.line = line;
  b.id = line;
  try {
    json j;
    try {
      j = json::parse(text);
    } catch (const json::parse_error& e) {
      throw Error(std::string("not valid JSON: ") + e.what());
    }
    if (!j.is_object()) throw Error("expected a JSON object, got " + shown(j));
    if (j.contains("id")) apply_field("id", j["id"], b);  // errors below carry the id
    for (const auto& [key, v] : j.items()) apply_field(key, v, b);
    const bool has_text = j.contains("prompt"), has_ids = j.contains("prompt_ids");
    if (!has_text && !has_ids) throw Error("needs 'prompt' (a string) or 'prompt_ids' (an array)");
    if (has_text && has_ids) throw Error("give 'prompt' or 'prompt_ids', not both");
  } catch (const std::exception& e) {
    b.error = fmt::format("line {}: {}", line, e.what());
  }
  return b;
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
            {"threads", a.threads}};
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
        {"full_tier", a.full_tier}};
  }
  if (q.mode != "full")
    j["compression"] = {{"compressor", q.compressor},
                        {"ratio", q.ratio},
                        {"compressed_bytes", s.compressed_bytes}};
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
  if (b.logprobs) {
    json lp = json::array();
    for (float v : r.output_logprobs) lp.push_back(nine_digits(v));
    j["output_logprobs"] = lp;
  }
  j["stats"] = stats_json(b.req, r.stats, a);
  return j;
}

std::vector<BatchLine> read_lines(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("--input: cannot open '" + path + "'");
  std::vector<BatchLine> lines;
  std::string text;
  for (size_t n = 1; std::getline(in, text); ++n) {
    if (!text.empty() && text.back() == '\r') text.pop_back();
    if (text.find_first_not_of(" \t") == std::string::npos) continue;  // blank line
    lines.push_back(parse_line(text, n));
  }
  return lines;
}

void print_summary(const BatchArgs& a, size_t requests, size_t ok, size_t tokens, double wall,
                   double load, const vericache::EngineStats& st) {
  const std::string sim =
      a.link_gbps > 0 ? fmt::format(" (simulated link {:g} GB/s)", a.link_gbps) : "";
  std::cerr << fmt::format("batch: {} requests, {} ok, {} failed | concurrency {}{}\n", requests,
                           ok, requests - ok, a.concurrency, a.lockstep ? ", lock-step" : "");
  std::cerr << fmt::format("tokens: {} in {:.3f} s wall, {:.1f} tokens/s{} | model load {:.2f} s\n",
                           tokens, wall, wall > 0 ? double(tokens) / wall : 0.0, sim, load);
  std::string busy;
  for (const auto& [name, f] : st.busy_fraction)
    busy += fmt::format("{}{} {:.1f}%", busy.empty() ? "" : ", ", name, 100.0 * f);
  std::cerr << fmt::format("busy: {}{}\n", busy.empty() ? "(no work recorded)" : busy, sim);
  std::cerr << fmt::format("full tier ({}): {:.2f} MiB read, {:.2f} MiB written\n", a.full_tier,
                           double(st.full_tier_bytes_read) / (1 << 20),
                           double(st.full_tier_bytes_written) / (1 << 20));
}

int run_batch(const BatchArgs& a) {
  using clock = std::chrono::steady_clock;
  std::vector<BatchLine> lines = read_lines(a.input);
  std::ofstream out(a.output, std::ios::binary | std::ios::trunc);
  if (!out) throw Error("--output: cannot open '" + a.output + "' for writing");

  vericache::EngineConfig cfg;
  cfg.model_dir = a.model_dir;
  cfg.threads = a.threads;
  cfg.full_tier = a.full_tier;
  cfg.disk_dir = a.disk_dir;
  cfg.link_bytes_per_second = a.link_gbps * 1e9;
  cfg.kv_dtype = a.kv_dtype;
  cfg.max_active = a.concurrency;
  cfg.max_queue = a.max_queue > 0 ? a.max_queue : std::max<size_t>(1, lines.size());
  cfg.lockstep = a.lockstep;
  cfg.trace = !a.trace.empty();

  spdlog::info("loading model from {}", a.model_dir);
  const auto load_start = clock::now();
  std::optional<vericache::Engine> engine;
  try {
    engine.emplace(cfg);
  } catch (const std::exception& e) {
    throw Error(e.what());
  }
  const auto start = clock::now();
  const double load = std::chrono::duration<double>(start - load_start).count();

  std::vector<std::optional<vericache::Engine::Submission>> subs(lines.size());
  for (size_t i = 0; i < lines.size(); ++i)
    if (lines[i].error.empty()) subs[i] = engine->submit(lines[i].req);

  size_t ok = 0, tokens = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    json j;
    if (!subs[i]) {
      j = {{"id", lines[i].id}, {"error", lines[i].error}, {"finish_reason", "error"}};
    } else {
      const vericache::Result r = subs[i]->result.get();
      j = result_json(lines[i], r, a);
      if (r.ok) {
        ++ok;
        tokens += r.output_ids.size();
      }
    }
    if (j.contains("error")) spdlog::warn("{}", j["error"].get<std::string>());
    out << j.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
    out.flush();
  }
  const double wall = std::chrono::duration<double>(clock::now() - start).count();
  if (!out) throw Error("--output: writing '" + a.output + "' failed");

  const vericache::EngineStats st = engine->stats();
  if (!a.trace.empty()) {
    try {
      engine->write_trace(a.trace);
    } catch (const std::exception& e) {
      throw Error(std::string("--trace: ") + e.what());
    }
  }
  print_summary(a, lines.size(), ok, tokens, wall, load, st);
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
      ->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--model", a->model_dir, "Model directory (Hugging Face layout)")
      ->capture_default_str();
  cmd->add_option("--full-tier", a->full_tier, "Where the full KV lives")
      ->capture_default_str()->check(CLI::IsMember({"host", "disk"}));
  cmd->add_option("--disk-dir", a->disk_dir, "Directory of the disk tier (default: a temp dir)");
  cmd->add_option("--link-gbps", a->link_gbps,
                  "Modelled link bandwidth to the full tier in GB/s (0 = unthrottled)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_flag("--lockstep", a->lockstep,
                "Everyone drafts, then everyone verifies (for comparison)");
  cmd->add_option("--trace", a->trace, "Write a Chrome trace-event JSON file");
  cmd->add_option("--threads", a->threads, "Worker threads per compute actor (0 = auto)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--max-queue", a->max_queue, "Waiting requests at most (default: every line)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--kv-dtype", a->kv_dtype, "KV cache storage")->capture_default_str()
      ->check(CLI::IsMember({"bf16", "f32"}));
  cmd->callback([&run, a] { run = [a] { return run_batch(*a); }; });
}

}  // namespace vc::cli
