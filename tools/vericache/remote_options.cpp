// The remote prefix cache's flags as the engine's config (batch, serve).
#include "tools/vericache/options.hpp"

#include <vericache/engine.hpp>

namespace vc::cli {

void apply_remote_options(const RemoteArgs& r, size_t block_tokens, vericache::EngineConfig& cfg) {
  if (!r.url.empty()) check_remote_chunk(r.chunk, block_tokens);
  cfg.remote_url = r.url;
  cfg.remote_chunk_tokens = r.chunk;
  cfg.remote_ttl_seconds = r.ttl;
  cfg.remote_timeout_ms = r.timeout_ms;
  cfg.remote_retry_ms = r.retry_ms;
  cfg.remote_compressed_first = r.flow == "compressed-first";
  cfg.remote_recompute_front = r.recompute_front;
  cfg.remote_recompute_front_when_idle = r.recompute_front_when_idle;
  cfg.remote_recompute_front_priced = r.recompute_front_priced;
  cfg.remote_fetchers = r.fetchers;
  cfg.remote_fetch_segment = r.fetch_segment;
  cfg.remote_compressed_suffix = r.compressed_suffix;
  cfg.remote_predraft = r.predraft;
}

}  // namespace vc::cli
