// The net_fetcher actor: owns the link to the remote prefix cache (a RemoteTier: its
// pool of pipelined connections and its write-behind publisher). Runs detached,
// since a fetch blocks on the network while it waits for the store.
//
// Tensor parallelism: one net_fetcher per group (net_fetcher_group) drives every
// rank's RemoteTier (each rank's chunks hold its KV heads under keys of its own)
// and fills every rank's full tier.
#pragma once
#include <memory>
#include <vector>

#include <caf/all.hpp>

#include "kvtiers/remote/remote_tier.hpp"
#include "runtime/draft_batcher.hpp"

namespace vc::actors {

/// Handles remote_fetch_msg (replies remote_fetched_msg), remote_fetch_compressed_msg
/// (replies remote_compressed_fetched_msg) and remote_publish_msg (replies
/// remote_published_msg), over the tier each message names.
caf::behavior net_fetcher(caf::event_based_actor* self, std::shared_ptr<RemoteTier> remote);

/// Compressed first in segments: the views `segment` (per rank, of the positions
/// the fetch `f` brought) joined onto `base` (per rank, the positions before; empty
/// for the first segment, which is returned as fetched). When the segment brought
/// nothing usable (no chunk, the ranks disagreed, a piece that does not join),
/// returns `base` with f.chunks 0, f.positions where it ends and f.stop_reason
/// saying why. The net_fetcher joins there, off the scheduler's thread.
[[nodiscard]] RankViews join_segment(const RankViews& base, RankViews segment, RemoteCompressedFetch& f);

/// The net_fetcher of a tensor-parallel group: remotes[r] and tiers[r] are rank r's
/// (the messages' tier is rank 0's, tiers[0]). A fetch fills every rank's entry from
/// its own chunks at once (rank r on a thread of its own, kept between fetches);
/// since the ranks prefill from the same position, every rank keeps the shortest
/// prefix any rank got (the longer ones are truncated; the stop reason says when
/// they differed). A compressed fetch returns every rank's view, or none when the
/// ranks' compressed prefixes differ. A publish publishes every rank's chunks from
/// its own tier, and with views each rank's compressed chunks under its own keys.
caf::behavior net_fetcher_group(caf::event_based_actor* self,
                                std::vector<std::shared_ptr<RemoteTier>> remotes,
                                std::vector<FullTier*> tiers);

}  // namespace vc::actors
