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

namespace vc::actors {

/// Handles remote_fetch_msg (replies remote_fetched_msg), remote_fetch_compressed_msg
/// (replies remote_compressed_fetched_msg) and remote_publish_msg (replies
/// remote_published_msg), over the tier each message names.
caf::behavior net_fetcher(caf::event_based_actor* self, std::shared_ptr<RemoteTier> remote);

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
