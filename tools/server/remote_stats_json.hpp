// A request's remote prefix cache stats as JSON: the fields `serve` answers under
// vericache.remote and `batch` writes under stats.remote (README, Remote prefix cache).
#pragma once
#include <nlohmann/json.hpp>
#include <vericache/engine.hpp>

namespace vc::server {

inline nlohmann::json remote_stats_json(const vericache::RequestStats& s) {
  return {{"chunks_hit", s.remote_chunks_hit},
          {"positions_hit", s.remote_positions},
          {"bytes_fetched_full", s.remote_bytes_fetched},
          {"fetch_seconds", s.remote_fetch_seconds},
          {"fetch_segments", s.remote_fetch_segments},
          {"recompute_front", s.remote_recompute_front},
          {"front_recomputed", s.remote_front_recomputed},
          {"front_price", s.remote_front_price},
          {"stop_reason", s.remote_stop_reason},
          {"chunks_published", s.remote_chunks_published},
          {"compressed_chunks_published", s.remote_compressed_chunks_published},
          {"compressed_first", s.remote_compressed_first},
          {"compressed_chunks_hit", s.remote_compressed_chunks_hit},
          {"compressed_positions_hit", s.remote_compressed_positions},
          {"bytes_fetched_compressed", s.remote_bytes_compressed},
          {"compressed_fetch_seconds", s.remote_compressed_fetch_seconds},
          {"compressed_stop_reason", s.remote_compressed_stop_reason},
          {"predrafted", s.remote_predrafted},
          {"predrafts_kept", s.remote_predrafts_kept},
          {"predraft_rounds", s.remote_predraft_rounds},
          {"full_wait_seconds", s.remote_full_wait_seconds}};
}

}  // namespace vc::server
