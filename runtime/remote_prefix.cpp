// The remote prefix cache's shared pieces (see the header).
#include "runtime/remote_prefix.hpp"

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "kernels/error.hpp"
#include "runtime/model.hpp"
#include "runtime/model/fingerprint.hpp"
#include "runtime/tp_comm.hpp"

namespace vc {

void check_remote_settings(int ttl_seconds, int timeout_ms, int retry_ms) {
  if (ttl_seconds < 0 || ttl_seconds > (1 << 30))
    throw Error("remote_ttl_seconds: must be 0 (never expire) to 1073741824, got " +
                std::to_string(ttl_seconds));
  if (timeout_ms < 1 || timeout_ms > 600000)
    throw Error("remote_timeout_ms: must be 1 to 600000, got " + std::to_string(timeout_ms));
  if (retry_ms < 0 || retry_ms > 3600000)
    throw Error("remote_retry_ms: must be 0 (never skip the store) to 3600000, got " +
                std::to_string(retry_ms));
}

std::unique_ptr<RemoteTier> open_remote_tier(const RemoteSettings& s, const KvCacheConfig& kv,
                                             const std::filesystem::path& model_dir,
                                             std::shared_ptr<StoreHealth> health) {
  check_remote_settings(s.ttl_seconds, s.timeout_ms, s.retry_ms);
  RemoteTierConfig rc;
  rc.url = s.url;
  rc.chunk_tokens = s.chunk_tokens;
  rc.ttl_seconds = s.ttl_seconds;
  rc.timeouts.connect = rc.timeouts.io = std::chrono::milliseconds(s.timeout_ms);
  rc.retry_after = std::chrono::milliseconds(s.retry_ms);
  rc.tp_rank = s.tp_rank;
  rc.tp_degree = s.tp_degree;
  rc.numerics = s.numerics;
  return std::make_unique<RemoteTier>(rc, kv, model_fingerprint(model_dir), std::move(health));
}

size_t remote_prefix_limit(const Compressor& c, size_t prompt_size, size_t stats_window) {
  if (prompt_size == 0 || c.stats_needs().hidden) return 0;
  size_t limit = prompt_size - 1;
  if (c.needs_stats())
    limit = prompt_size > stats_window ? std::min(limit, prompt_size - stats_window) : 0;
  return limit;
}

MeetingRanks meeting_ranks(const TensorParallelRank& tp) {
  // Counts of chunks, exact in a float (far below 2^24).
  return {[&tp](bool mine) {
            float x = mine ? 1.0f : 0.0f;
            tp.comm->all_reduce_sum(tp.rank, &x, 1);
            return x > 0.5f;
          },
          [&tp](size_t mine) {
            std::vector<float> all(size_t(tp.degree));
            const float m = float(mine);
            tp.comm->all_gather(tp.rank, &m, 1, all.data());
            return size_t(*std::min_element(all.begin(), all.end()));
          }};
}

}  // namespace vc
