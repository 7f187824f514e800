// The net_fetcher actor: owns the link to the remote prefix cache (a RemoteTier: its
// pool of pipelined connections and its write-behind publisher). Runs detached,
// since a fetch blocks on the network while it waits for the store.
#pragma once
#include <memory>

#include <caf/all.hpp>

#include "kvtiers/remote/remote_tier.hpp"

namespace vc::actors {

/// Handles remote_fetch_msg (replies remote_fetched_msg), remote_fetch_compressed_msg
/// (replies remote_compressed_fetched_msg) and remote_publish_msg (replies
/// remote_published_msg).
caf::behavior net_fetcher(caf::event_based_actor* self, std::shared_ptr<RemoteTier> remote);

}  // namespace vc::actors
