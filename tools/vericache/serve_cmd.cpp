// `vericache serve`: an OpenAI-compatible HTTP server over the actor engine
// (tools/server/). Prints "listening on http://HOST:PORT" on stdout once it accepts
// connections. SIGTERM or SIGINT drains (requests in flight finish, new ones get
// 503) and exits 0; a second signal exits at once (128 + signo).
#include <arpa/inet.h>
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <vericache/engine.hpp>

#include "kernels/error.hpp"
#include "kvtiers/paged_kv_cache.hpp"
#include "kvtiers/scratch_registry.hpp"
#include "runtime/device_budget.hpp"
#include "runtime/model/config.hpp"
#include "runtime/model/tokenizer.hpp"
#include "tools/server/chat_template.hpp"
#include "tools/server/tool_calls.hpp"
#include "tools/server/http_server.hpp"
#include "tools/server/server_metrics.hpp"
#include "tools/vericache/commands.hpp"
#include "tools/vericache/interrupt.hpp"
#include "tools/vericache/options.hpp"
#include "tools/vericache/placement_option.hpp"

namespace vc::cli {

namespace {

struct ServeArgs {
  std::string model_dir = default_model_dir();
  std::string served_name;  // "" = the model directory's name
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string api_key;
  size_t max_concurrency = 16;
  size_t verify_batch = vericache::EngineConfig{}.verify_batch;
  size_t max_queue = 64;
  size_t max_connections = 256;
  std::string max_body = "1M";
  int64_t max_prompt_tokens = 0;
  int64_t max_tokens_limit = 0;
  int64_t default_max_tokens = 128;
  std::string mode = "vericache";
  std::string tool_call_parser = "auto";
  std::string compressor = "snapkv";
  double ratio = 4.0;
  std::string draft = "16";
  RequestInput hierarchy;  // --draft-hierarchy and the n-gram options
  double drain_seconds = 30;
  double read_timeout_seconds = 30;
  int threads = 0;
  int tp = 1;  // --tp: tensor-parallel degree (EngineConfig::tp)
  std::string placement = "none";  // --placement (EngineConfig::placement)
  std::string full_tier = "host";
  std::string disk_dir;
  std::string fast_memory = "0";
  double gpu_memory_utilization = kDefaultGpuMemoryUtilization;
  std::string full_tier_budget = "0";
  std::string kv_dtype = "bf16";
  size_t block_tokens = kDefaultBlockTokens;
  bool whole_prefill = false;  // --whole-prefill: EngineConfig::slice_prefill off
  size_t prefill_chunk = 256;  // --prefill-chunk
  std::string device = "cpu";
  RemoteArgs remote;
};

int g_stop_pipe[2] = {-1, -1};
std::atomic<int> g_stop_signals{0};

// First signal: wake the accept loop (it drains). Second: leave now.
void on_stop_signal(int signo) {
  const int saved = errno;
  if (g_stop_signals.fetch_add(1) == 0) {
    const char b = 1;
    if (::write(g_stop_pipe[1], &b, 1) == 1) {
      errno = saved;
      return;
    }
  }
  remove_all_scratch();
  ::_exit(128 + signo);
}

void install_drain_handlers() {
  if (::pipe2(g_stop_pipe, O_CLOEXEC) != 0)
    throw Error(std::string("cannot create the signal pipe: ") + std::strerror(errno));
  // The CLI's watcher thread takes the signals (interrupt.hpp) and calls this.
  set_interrupt_hook([](int signo) {
    if (signo != SIGINT && signo != SIGTERM) return false;  // SIGHUP: clean up, exit
    on_stop_signal(signo);
    return true;
  });
  ::signal(SIGPIPE, SIG_IGN);  // a client gone mid-write is an error value, not a signal
}

bool is_loopback(const std::string& host) {
  in_addr a4{};
  in6_addr a6{};
  if (::inet_pton(AF_INET, host.c_str(), &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
  if (::inet_pton(AF_INET6, host.c_str(), &a6) == 1) return IN6_IS_ADDR_LOOPBACK(&a6);
  return false;
}

int run_serve(const ServeArgs& a) {
  if (!is_loopback(a.host) && a.api_key.empty())
    throw Error("--host " + a.host + ": binding a non-loopback address needs --api-key");
  server::ServeSettings settings;
  settings.model_name = a.served_name.empty()
                            ? std::filesystem::path(a.model_dir).lexically_normal().filename().string()
                            : a.served_name;
  if (settings.model_name.empty())
    settings.model_name = std::filesystem::path(a.model_dir).parent_path().filename().string();
  settings.mode = a.mode;
  settings.compressor = a.compressor;
  settings.ratio = a.ratio;
  settings.draft = a.draft;
  check_ngram_sizes(a.hierarchy);
  settings.draft_hierarchy = a.hierarchy.draft_hierarchy;
  settings.ngram_min = a.hierarchy.ngram_min;
  settings.ngram_max = a.hierarchy.ngram_max;
  settings.ngram_proposal = a.hierarchy.ngram_proposal;
  settings.default_max_tokens = a.default_max_tokens;
  settings.max_tokens_limit = a.max_tokens_limit;
  settings.max_prompt_tokens = a.max_prompt_tokens;
  settings.max_body_bytes = parse_bytes("--max-body", a.max_body);
  if (settings.max_body_bytes == 0) throw Error("--max-body: expected a size > 0, got 0");
  const std::optional<server::ToolCallParser> named_parser =
      a.tool_call_parser == "auto" ? std::nullopt : server::tool_call_parser_named(a.tool_call_parser);
  if (a.tool_call_parser != "auto" && !named_parser)
    throw Error("--tool-call-parser: expected auto, hermes, llama3_json or none, got '" +
                a.tool_call_parser + "'");

  vericache::EngineConfig cfg;
  cfg.model_dir = a.model_dir;
  cfg.threads = a.threads;
  cfg.device = a.device;
  cfg.tp = a.tp;
  cfg.full_tier = a.full_tier;
  cfg.disk_dir = a.disk_dir;
  if (!a.disk_dir.empty() && a.full_tier != "disk")  // said so, as generate does
    spdlog::warn("--disk-dir is not used without --full-tier disk");
  cfg.kv_dtype = a.kv_dtype;
  cfg.max_active = a.max_concurrency;
  cfg.verify_batch = a.verify_batch;
  cfg.max_queue = a.max_queue;
  cfg.fast_memory_bytes = parse_bytes("--fast-memory", a.fast_memory);
  cfg.gpu_memory_utilization = a.gpu_memory_utilization;
  cfg.full_tier_bytes = parse_bytes("--full-tier-budget", a.full_tier_budget);
  cfg.block_tokens = a.block_tokens;
  cfg.slice_prefill = !a.whole_prefill;
  cfg.prefill_chunk = a.prefill_chunk;
  apply_remote_options(a.remote, a.block_tokens, cfg);
  cfg.placement = a.placement;

  spdlog::info("loading model from {}{}", a.model_dir,
               a.tp > 1 ? fmt::format(" ({} tensor-parallel ranks)", a.tp) : "");
  const ModelConfig mc = load_model_config(std::filesystem::path(a.model_dir) / "config.json");
  const Tokenizer tok = Tokenizer::from_file(std::filesystem::path(a.model_dir) / "tokenizer.json");
  std::optional<vericache::Engine> engine;
  try {
    engine.emplace(cfg);
  } catch (const std::exception& e) {
    throw Error(engine_error_with_flags(e.what(), "--max-concurrency"));
  }
  log_placement(*engine);
  // The checkpoint's chat template, for /v1/chat/completions.
  const std::optional<server::ChatTemplate> chat = server::ChatTemplate::from_model_dir(a.model_dir);
  if (!chat)
    spdlog::warn("{}: no chat_template in tokenizer_config.json; /v1/chat/completions answers 400",
                 a.model_dir);
  else if (!chat->parse_error().empty())
    spdlog::warn("the model's chat template cannot be rendered ({}); /v1/chat/completions answers 500",
                 chat->parse_error());
  server::ServerMetrics metrics;
  server::ServerState state;
  state.chat_template = chat ? &*chat : nullptr;
  // auto: the format the template itself writes tool calls in.
  state.tool_call_parser = named_parser ? *named_parser
                           : chat       ? server::detect_tool_call_parser(chat->source())
                                        : server::ToolCallParser::none;
  if (chat) spdlog::info("tool call parser: {}", server::tool_call_parser_name(state.tool_call_parser));
  state.metrics = &metrics;
  state.engine = &*engine;
  state.tokenizer = &tok;
  state.limits = RequestLimits::of(mc);
  state.settings = settings;

  server::HttpConfig http;
  http.host = a.host;
  http.port = uint16_t(a.port);
  http.api_key = a.api_key;
  http.max_connections = a.max_connections;
  http.drain_seconds = a.drain_seconds;
  http.read_timeout_seconds = a.read_timeout_seconds;
  install_drain_handlers();
  server::HttpServer srv(state, http);
  srv.metrics_text = [&] { return metrics.render(engine->stats(), engine->placement()); };
  std::cout << fmt::format("listening on http://{}:{} (model '{}')", a.host, srv.port(),
                           settings.model_name)
            << std::endl;
  srv.run(g_stop_pipe[0]);
  spdlog::info("drained; shutting down");
  return 0;
}

}  // namespace

void add_serve_command(CLI::App& app, Runner& run) {
  auto a = std::make_shared<ServeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "serve", "OpenAI-compatible HTTP server (/v1/completions, /v1/chat/completions, "
               "/v1/models, /health, /metrics)");
  cmd->add_option("--model", a->model_dir, "Model directory (Hugging Face layout)")
      ->capture_default_str();
  cmd->add_option("--served-model-name", a->served_name,
                  "The model id clients name (default: the model directory's name)");
  cmd->add_option("--host", a->host, "Address to bind (a non-loopback one needs --api-key)")
      ->capture_default_str();
  cmd->add_option("--port", a->port, "TCP port (0 = any free port, printed at start)")
      ->capture_default_str()->check(integer_in(0, 65535));
  cmd->add_option("--api-key", a->api_key, "Require 'Authorization: Bearer KEY' on /v1/*");
  cmd->add_option("--max-concurrency", a->max_concurrency, "Requests decoding at once")
      ->capture_default_str()->check(integer_in(1, 4096));
  cmd->add_option("--verify-batch", a->verify_batch,
                  "Requests whose verify passes may share one forward pass (EngineConfig::verify_batch)")
      ->capture_default_str()->check(integer_in(1, 64));
  cmd->add_option("--max-queue", a->max_queue,
                  "Requests waiting beyond --max-concurrency; more get 429")
      ->capture_default_str()->check(integer_in(1, 1 << 20));
  cmd->add_option("--max-connections", a->max_connections, "Open connections; more get 503")
      ->capture_default_str()->check(integer_in(1, 1 << 16));
  cmd->add_option("--max-body", a->max_body, "Largest request body, e.g. 1M (more gets 413)")
      ->capture_default_str()->check(bytes_value());
  cmd->add_option("--max-prompt-tokens", a->max_prompt_tokens,
                  "Longest prompt in tokens (0 = the model's context)")
      ->capture_default_str()->check(integer_in(0));
  cmd->add_option("--max-tokens-limit", a->max_tokens_limit,
                  "Largest max_tokens a request may ask for (0 = the model's context)")
      ->capture_default_str()->check(integer_in(0));
  cmd->add_option("--default-max-tokens", a->default_max_tokens,
                  "max_tokens of a request that does not say")
      ->capture_default_str()->check(integer_in(1));
  cmd->add_option("--mode", a->mode, "Default decode mode of a request")
      ->capture_default_str()->check(CLI::IsMember({"full", "lossy", "vericache"}));
  cmd->add_option("--compressor", a->compressor, "Default compressor")->capture_default_str();
  cmd->add_option("--ratio", a->ratio, "Default compression ratio")
      ->capture_default_str()->check(number_in(1.0, 1000.0));
  cmd->add_option("--draft", a->draft, "Default draft length, or auto")
      ->capture_default_str()->check(draft_value());
  add_draft_hierarchy_options(*cmd, a->hierarchy);
  cmd->add_option("--tool-call-parser", a->tool_call_parser,
                  "How tool calls are found in chat replies to requests with tools: auto (from "
                  "the chat template), hermes (<tool_call>), llama3_json, none")
      ->capture_default_str();
  cmd->add_option("--drain-seconds", a->drain_seconds,
                  "On SIGTERM, how long requests in flight may finish before they are cancelled")
      ->capture_default_str()->check(number_in(0.0));
  cmd->add_option("--read-timeout-s", a->read_timeout_seconds,
                  "Seconds a request's headers may take to arrive, then its body (408 after; "
                  "a connection that sent nothing of a request in that time is closed)")
      ->capture_default_str()->check(number_in(0.0, 1e6, true));
  cmd->add_option("--threads", a->threads, "Worker threads per compute actor (0 = auto)")
      ->capture_default_str()->check(integer_in(0, 1024));
  cmd->add_option("--tp", a->tp,
                  "Tensor-parallel degree: the engine's drafter, verifier and mover each drive this many "
                  "ranks (threads) over shards of the model, KV sharded by KV heads; --threads, "
                  "--fast-memory and --full-tier-budget are then per rank")
      ->capture_default_str()->check(integer_in(1, 64));
  add_placement_option(*cmd, a->placement);
  cmd->add_option("--full-tier", a->full_tier, "Where the full KV lives")
      ->capture_default_str()->check(CLI::IsMember({"host", "disk"}));
  cmd->add_option("--disk-dir", a->disk_dir, "Directory of the disk tier (default: a temp dir)");
  cmd->add_option("--fast-memory", a->fast_memory,
                  "Fast-memory budget for all KV in fast memory, e.g. 256M (0 = 65,536 tokens "
                  "of full KV on the CPU; on a GPU, its free memory: --gpu-memory-utilization)")
      ->capture_default_str()->check(bytes_value());
  cmd->add_option("--full-tier-budget", a->full_tier_budget,
                  "Budget of the full tier, e.g. 4G (0 = unlimited)")
      ->capture_default_str()->check(bytes_value());
  cmd->add_option("--kv-dtype", a->kv_dtype, "KV cache storage")->capture_default_str()
      ->check(CLI::IsMember({"bf16", "f32"}));
  add_block_tokens_option(*cmd, a->block_tokens);
  cmd->add_flag("--whole-prefill", a->whole_prefill, kWholePrefillHelp);
  add_prefill_chunk_option(*cmd, a->prefill_chunk);
  add_device_option(*cmd, a->device);
  add_gpu_memory_option(*cmd, a->gpu_memory_utilization);
  add_remote_options(*cmd, a->remote);
  cmd->callback([&run, a] { run = [a] { return run_serve(*a); }; });
}

}  // namespace vc::cli
