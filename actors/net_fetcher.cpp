// The net_fetcher behavior: a thin mailbox over RemoteTier (see the header).
#include "actors/net_fetcher.hpp"

#include "actors/protocol.hpp"

namespace vc::actors {

caf::behavior net_fetcher(caf::event_based_actor*, std::shared_ptr<RemoteTier> remote) {
  return {
      [remote](remote_fetch_msg& m) -> remote_fetched_msg {
        return remote_fetched_msg{m.id, remote->fetch_prefix(m.prompt, m.max_positions, *m.tier, m.id)};
      },
      [remote](remote_publish_msg& m) -> size_t {
        return remote->publish(m.prompt, m.first_chunk, *m.tier, m.id);
      },
  };
}

}  // namespace vc::actors
