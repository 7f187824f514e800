// Option checking for the `vericache` CLI: validators whose messages come from the
// shared request validation layer (runtime/request_validation.hpp), the strict
// reader of `--config FILE`, and the one-line error report every failure ends in.
#pragma once
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

namespace vc {
struct RequestInput;
}
namespace vericache {
struct EngineConfig;
}

namespace vc::cli {

/// --draft-hierarchy none|ngram and the n-gram level's --ngram-min, --ngram-max,
/// --ngram-proposal, written into `q` (generate: the request; batch: every line's
/// default).
void add_draft_hierarchy_options(CLI::App& cmd, RequestInput& q);
/// --ngram-max must be at least --ngram-min: vc::Error naming --ngram-max otherwise.
void check_ngram_sizes(const RequestInput& q);

/// The remote prefix cache's options of the engine commands (batch, serve).
struct RemoteArgs {
  std::string url;        // --remote redis://HOST:PORT ("" = none)
  size_t chunk = 256;     // --remote-chunk
  int ttl = 86400;        // --remote-ttl
  int timeout_ms = 1000;  // --remote-timeout-ms
  int retry_ms = 5000;    // --remote-retry-ms
  std::string flow = "compressed-first";  // --remote-flow
  int fetchers = 2;       // --remote-fetchers
  size_t fetch_segment = 8;  // --remote-fetch-segment
  size_t compressed_suffix = 0;  // --remote-compressed-suffix (0: one chunk)
  size_t predraft = 256;  // --remote-predraft
  bool recompute_front = false;  // --remote-recompute-front
  bool recompute_front_when_idle = false;  // --remote-recompute-front-when-idle
  bool recompute_front_priced = false;     // --remote-recompute-front-priced
};
/// --remote-recompute-front's help, shared by generate and the engine commands.
inline constexpr const char* kRemoteRecomputeFrontHelp =
    "Full flow: fetch the cached prefix's chunks from the last one down while prefilling it "
    "here from the first one up, until the two meet (same tokens)";
/// --whole-prefill's help (batch, serve: EngineConfig::slice_prefill off).
inline constexpr const char* kWholePrefillHelp =
    "Prefill each prompt whole before anything else runs on the drafter, instead of a chunk at a "
    "time between the other requests' draft steps (same tokens)";
/// --remote-predraft's help, shared by generate and the engine commands.
inline constexpr const char* kRemotePredraftHelp =
    "compressed-first, vericache: draft up to N tokens ahead while the full chunks arrive (at "
    "least one round's, at most --fold-every plus one); later rounds use them while the "
    "verifier agrees";
/// --remote-retry-ms's help, shared by generate and the engine commands.
inline constexpr const char* kRemoteRetryHelp =
    "After a store fault, skip the store this long: requests meanwhile prefill locally at "
    "once (0 = always try)";
/// --device cpu|cuda[:N]: where the weight products run (Model::on_device);
/// checked as it is parsed.
void add_device_option(CLI::App& cmd, std::string& device);
/// --gpu-memory-utilization F (generate, batch, serve): on a GPU without
/// --fast-memory, the share of the device's memory the process may hold; the KV
/// budget is what that leaves once the weights are on it (device_kv_budget).
void add_gpu_memory_option(CLI::App& cmd, double& utilization);
/// --block-tokens N (generate, batch, serve): KV positions per paged block.
void add_block_tokens_option(CLI::App& cmd, size_t& block_tokens);
/// --prefill-chunk N (batch, serve, bench interleave: EngineConfig::prefill_chunk).
void add_prefill_chunk_option(CLI::App& cmd, size_t& prefill_chunk);
/// A remote chunk is whole KV blocks: vc::Error naming --remote-chunk and
/// --block-tokens otherwise (checked after parsing, when both are known; the
/// commands check it when --remote is given).
void check_remote_chunk(size_t chunk_tokens, size_t block_tokens);

/// --remote, --remote-chunk, --remote-ttl, --remote-timeout-ms, --remote-retry-ms,
/// --remote-flow (as generate's), --remote-fetchers and --remote-fetch-segment (the
/// engine's alone).
void add_remote_options(CLI::App& cmd, RemoteArgs& r);
/// The engine's remote fields from `r` (batch, serve); checks --remote-chunk against
/// `block_tokens` when --remote is given (check_remote_chunk).
void apply_remote_options(const RemoteArgs& r, size_t block_tokens, vericache::EngineConfig& cfg);

/// An integer in [lo, hi] ("expected an integer >= 0, got '-2'").
[[nodiscard]] CLI::Validator integer_in(int64_t lo,
                                        int64_t hi = std::numeric_limits<int64_t>::max());
/// A finite number in [lo, hi] (or (lo, hi] with lo_open).
[[nodiscard]] CLI::Validator number_in(double lo,
                                       double hi = std::numeric_limits<double>::infinity(),
                                       bool lo_open = false);
/// An engine's error as the command line says it: "EngineConfig.fast_memory_bytes:
/// ..." becomes "--fast-memory (EngineConfig.fast_memory_bytes): ..." for the fields
/// `batch` and `serve` set from a flag (`concurrency_flag`: the flag of max_active,
/// --concurrency or --max-concurrency).
[[nodiscard]] std::string engine_error_with_flags(const std::string& what,
                                                  const std::string& concurrency_flag);
/// A seed: an integer 0..2^64-1.
[[nodiscard]] CLI::Validator seed_value();
/// A draft length 0..4096 or "auto".
[[nodiscard]] CLI::Validator draft_value();

/// A byte count: digits with an optional K, M, G or T suffix (powers of 1024),
/// e.g. "512M"; "0" allowed. parse_bytes throws vc::Error naming `what`.
[[nodiscard]] CLI::Validator bytes_value();
[[nodiscard]] size_t parse_bytes(const std::string& what, const std::string& text);

/// Reads `--row-costs FILE`, the JSON `vericache bench rows --json` prints: the
/// (rows, seconds per pass) of its "rows" entries, rows ascending. vc::Error naming
/// the file and what is wrong otherwise.
[[nodiscard]] std::vector<std::pair<double, double>> load_row_costs(const std::string& path);

/// The option a request field is set by: "max_tokens" -> "--max-tokens".
[[nodiscard]] std::string option_of_field(const std::string& field);

/// Reads `--config FILE` strictly (the format of configs/defaults.conf): sections
/// [subcommand] or [bench.decode], `key = value` lines with long option names,
/// "strings", numbers, true/false and [lists]. Unknown sections and keys, keys
/// before any section, malformed lines and binary data are errors naming the file
/// and line; the file is read up to 1 MiB. Remembers which option each applied
/// line set, so that a later error about that option can name the file and line.
class StrictConfig : public CLI::Config {
 public:
  StrictConfig(CLI::App& app, CLI::Option*& config_option)
      : app_(app), config_option_(config_option) {}
  std::string to_config(const CLI::App*, bool, bool, std::string) const override { return ""; }
  std::vector<CLI::ConfigItem> from_config(std::istream& in) const override;
  /// "FILE:LINE" of the config line that set `option` ("--threads"), or "".
  [[nodiscard]] std::string origin_of(const std::string& option) const;

 private:
  CLI::App& app_;
  CLI::Option*& config_option_;
  mutable std::map<std::string, std::string> origins_;
};

/// Prints "error: <message>" as one line on stderr (whatever --log-level says),
/// prefixed with the config file and line when the message starts with an option
/// that a config line set.
void report_error(const std::string& message, const StrictConfig* config);

}  // namespace vc::cli
