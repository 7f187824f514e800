// The net_fetcher behavior: a thin mailbox over RemoteTier (see the header).
#include "actors/net_fetcher.hpp"

#include "actors/protocol.hpp"

namespace vc::actors {

caf::behavior net_fetcher(caf::event_based_actor*, std::shared_ptr<RemoteTier> remote) {
  return {
      [remote](remote_fetch_msg& m) -> remote_fetched_msg {
        remote_fetched_msg out{m.id, {}, {}};
        bool created = false;
        try {
          if (m.create_positions > 0) {
            m.tier->create(m.id, m.create_positions);
            created = true;
          }
          out.fetch = remote->fetch_prefix(m.prompt, m.max_positions, *m.tier, m.id);
        } catch (const std::exception& e) {  // the tier's fault; store faults never throw
          if (created) m.tier->release_if_present(m.id);
          out.fetch = RemoteFetch{};
          out.error = e.what();
        }
        return out;
      },
      [remote](remote_fetch_compressed_msg& m) -> remote_compressed_fetched_msg {
        remote_compressed_fetched_msg out{m.id, nullptr, {}};
        out.fetch = remote->fetch_compressed(m.prompt, m.max_positions, m.spec);
        if (out.fetch.view) {
          out.view = std::make_shared<const CompressedView>(std::move(*out.fetch.view));
          out.fetch.view.reset();
        }
        return out;
      },
      [remote](remote_publish_msg& m) -> remote_published_msg {
        remote_published_msg out;
        try {
          out.chunks = remote->publish(m.prompt, m.first_chunk, *m.tier, m.id);
        } catch (const std::exception&) {
          // The entry was gone or unreadable: nothing published, nothing wrong.
        }
        if (m.view) out.compressed_chunks = remote->publish_compressed(m.prompt, 0, *m.view, m.view_spec);
        return out;
      },
  };
}

}  // namespace vc::actors
