// `vericache cache stats|clear --remote redis://HOST:PORT`: what this project holds in
// the remote prefix cache, and deleting it (only its own keys, vc:kv:*).
#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kvtiers/remote/remote_tier.hpp"
#include "tools/vericache/commands.hpp"
#include "tools/vericache/options.hpp"

namespace vc::cli {

namespace {

struct CacheArgs {
  std::string remote;
  bool json = false;
  int timeout_ms = 1000;
};

RedisTimeouts timeouts_of(const CacheArgs& a) {
  RedisTimeouts t;
  t.connect = t.io = std::chrono::milliseconds(a.timeout_ms);
  return t;
}

int run_cache_stats(const CacheArgs& a) {
  const RedisEndpoint ep = parse_redis_url(a.remote);
  const RemoteStoreStats s = remote_store_stats(ep, timeouts_of(a));
  if (a.json) {
    std::cout << nlohmann::json{{"url", ep.url()},
                                {"full_chunks", s.full_chunks},
                                {"compressed_chunks", s.compressed_chunks},
                                {"value_bytes", s.value_bytes},
                                {"store_used_memory", s.used_memory_human}}
                     .dump()
              << "\n";
  } else {
    std::cout << fmt::format("{}: {} full chunks, {} compressed chunks, {} bytes of values; "
                             "the store uses {}\n",
                             ep.url(), s.full_chunks, s.compressed_chunks, s.value_bytes,
                             s.used_memory_human);
  }
  return 0;
}

int run_cache_clear(const CacheArgs& a) {
  const RedisEndpoint ep = parse_redis_url(a.remote);
  const size_t n = remote_store_clear(ep, timeouts_of(a));
  if (a.json) std::cout << nlohmann::json{{"url", ep.url()}, {"deleted_keys", n}}.dump() << "\n";
  else std::cout << fmt::format("{}: deleted {} keys ({}*)\n", ep.url(), n, kRemoteKeyPrefix);
  return 0;
}

}  // namespace

void add_cache_command(CLI::App& app, Runner& run) {
  auto a = std::make_shared<CacheArgs>();
  CLI::App* cmd = app.add_subcommand("cache", "The remote prefix cache: stats or clear");
  cmd->require_subcommand(1);
  for (const char* name : {"stats", "clear"}) {
    CLI::App* sub = cmd->add_subcommand(name, std::string(name) == std::string("stats")
                                                  ? "Count this project's chunks in the store"
                                                  : "Delete this project's chunks (vc:kv:*), nothing else");
    sub->add_option("--remote", a->remote, "The store, redis://HOST:PORT")->required();
    sub->add_option("--timeout-ms", a->timeout_ms, "Deadline of a connect and of each command")
        ->capture_default_str()->check(integer_in(1, 600000));
    sub->add_flag("--json", a->json, "Print JSON");
    const bool stats = std::string(name) == "stats";
    sub->callback([&run, a, stats] {
      run = [a, stats] { return stats ? run_cache_stats(*a) : run_cache_clear(*a); };
    });
  }
}

}  // namespace vc::cli
