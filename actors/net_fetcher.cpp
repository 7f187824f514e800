// The net_fetcher behaviors: a thin mailbox over RemoteTier (see the header).
#include "actors/net_fetcher.hpp"

#include <algorithm>
#include <chrono>

#include "actors/protocol.hpp"
#include "kvtiers/remote/back_fetch_board.hpp"
#include "runtime/rank_group.hpp"
#include "runtime/tp_comm.hpp"

namespace vc::actors {

namespace {

// Every rank's prefix of `m.prompt` into its own entry (created first when asked),
// all ranks at once (rank r on `ranks`' thread r, kept between fetches); then every
// entry cut to the shortest. Throws on a tier fault (after freeing the entries it
// created).
RemoteFetch fetch_every_rank(const std::vector<std::shared_ptr<RemoteTier>>& remotes,
                             const std::vector<FullTier*>& tiers, const RankGroup& ranks,
                             const remote_fetch_msg& m) {
  const size_t d = remotes.size();
  size_t created = 0;
  try {
    if (m.create_positions > 0)
      for (; created < d; ++created) tiers[created]->create(m.id, m.create_positions);
    std::vector<RemoteFetch> got(d);
    ranks.run([&](int r) {
      got[size_t(r)] = remotes[size_t(r)]->fetch_prefix(m.prompt, m.max_positions, *tiers[size_t(r)],
                                                        m.id, m.from_positions);
    });
    RemoteFetch out = got[0];
    size_t lo = got[0].positions, hi = lo;
    out.bytes_full = 0;
    for (const RemoteFetch& g : got) {
      lo = std::min(lo, g.positions);
      hi = std::max(hi, g.positions);
      out.bytes_full += g.bytes_full;
      out.seconds = std::max(out.seconds, g.seconds);
      if (out.stop_reason.empty()) out.stop_reason = g.stop_reason;
    }
    if (lo != hi) {
      for (size_t r = 0; r < d; ++r) tiers[r]->truncate(m.id, lo);
      const size_t chunk = remotes[0]->layout().chunk_tokens;
      out.positions = lo;
      out.chunks = (lo - m.from_positions) / chunk;
      out.stop_reason = "the tensor-parallel ranks' cached prefixes differ (" + std::to_string(lo) +
                        " to " + std::to_string(hi) + " positions): every rank takes " +
                        std::to_string(lo);
    }
    return out;
  } catch (...) {
    for (size_t r = 0; r < created; ++r) tiers[r]->release_if_present(m.id);
    throw;
  }
}

// Every rank's compressed prefix (its KV heads' chunks) at once. The ranks draft
// from the same position: when their prefixes differ (a chunk missing for one
// rank) none is used and the request takes the full flow, as with no hit.
RemoteCompressedFetch fetch_compressed_every_rank(const std::vector<std::shared_ptr<RemoteTier>>& remotes,
                                                  const RankGroup& ranks,
                                                  const remote_fetch_compressed_msg& m, RankViews& views) {
  const size_t d = remotes.size();
  std::vector<RemoteCompressedFetch> got(d);
  ranks.run([&](int r) {
    got[size_t(r)] = remotes[size_t(r)]->fetch_compressed(m.prompt, m.max_positions, m.spec, m.from_positions);
  });
  RemoteCompressedFetch out = std::move(got[0]);
  size_t lo = out.positions, hi = lo;
  for (size_t r = 1; r < d; ++r) {
    lo = std::min(lo, got[r].positions);
    hi = std::max(hi, got[r].positions);
    out.bytes += got[r].bytes;
    out.seconds = std::max(out.seconds, got[r].seconds);
  }
  if (lo != hi) {
    out.stop_reason = "the tensor-parallel ranks' compressed prefixes differ (" + std::to_string(lo) +
                      " to " + std::to_string(hi) + " positions): " +
                      (m.from_positions == 0 ? std::string("none is used")
                                             : "the chunks from " + std::to_string(m.from_positions) + " are not used");
    out.view.reset();
    return out;
  }
  if (!out.view) return out;
  views.push_back(std::make_shared<const CompressedView>(std::move(*out.view)));
  out.view.reset();
  for (size_t r = 1; r < d; ++r) views.push_back(std::make_shared<const CompressedView>(std::move(*got[r].view)));
  return out;
}

caf::behavior behavior_over(std::vector<std::shared_ptr<RemoteTier>> remotes,
                            std::vector<FullTier*> tiers) {
  // Degree 1 without tiers of its own: the message's tier.
  auto tiers_of = [tiers](FullTier* named) {
    return tiers.empty() ? std::vector<FullTier*>{named} : tiers;
  };
  // The ranks' fetches run at once, each on a thread of its own kept between
  // fetches (so the placement can bind it).
  const int degree = int(remotes.size());
  auto ranks = std::make_shared<RankGroup>(degree > 1 ? std::make_shared<CpuCommunicator>(degree) : nullptr);
  return {
      [remotes, tiers_of, ranks](remote_fetch_msg& m) -> remote_fetched_msg {
        remote_fetched_msg out{m.id, {}, {}};
        try {
          out.fetch = fetch_every_rank(remotes, tiers_of(m.tier), *ranks, m);
        } catch (const std::exception& e) {  // the tier's fault; store faults never throw
          out.fetch = RemoteFetch{};
          out.error = e.what();
        }
        return out;
      },
      [remotes, ranks](remote_fetch_compressed_msg& m) -> remote_compressed_fetched_msg {
        remote_compressed_fetched_msg out{m.id, {}, {}};
        if (m.from_positions == 0 && m.max_suffix > 0 && !m.prompt.empty()) {  // worth its bytes?
          // The whole prefix counts (the segment asked for may be its first part);
          // the count's time is the fetch's.
          const auto t0 = std::chrono::steady_clock::now();
          std::vector<size_t> chunks(remotes.size());
          ranks->run([&](int r) {
            chunks[size_t(r)] = remotes[size_t(r)]->count_compressed(m.prompt, m.prompt.size() - 1, m.spec);
          });
          out.fetch.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          // The most any rank holds (ranks that differ are the fetch's to report).
          const size_t held = *std::max_element(chunks.begin(), chunks.end()) * remotes[0]->layout().chunk_tokens;
          if (m.prompt.size() - held > m.max_suffix) {
            out.fetch.stop_reason = "the store's compressed prefix of " + std::to_string(held) +
                                    " positions leaves a suffix of " + std::to_string(m.prompt.size() - held) +
                                    " positions, over the " + std::to_string(m.max_suffix) +
                                    " the request may draft over: not fetched, full flow";
            return out;
          }
        }
        RankViews segment;
        const double counted = out.fetch.seconds;
        out.fetch = fetch_compressed_every_rank(remotes, *ranks, m, segment);
        out.fetch.seconds += counted;
        out.views = join_segment(m.base, std::move(segment), out.fetch);
        return out;
      },
      [remotes, ranks](remote_fetch_back_msg& m) {
        ranks->run([&](int r) {  // each rank's chunks into its own meeting
          BackFetchMeeting& mine = *m.meetings.at(size_t(r));
          fetch_back_into(*remotes[size_t(r)], m.prompt, m.max_positions, mine);
          // The ranks keep the chunks all of them hold: below this rank's run (all
          // of them, when it took none) the others' fetches bring nothing of use.
          const auto [floor, why] = group_floor(mine, size_t(r));
          for (size_t o = 0; o < m.meetings.size(); ++o)
            if (o != size_t(r)) m.meetings[o]->keep_above(floor, why);
        });
        return true;
      },
      [remotes, tiers_of](remote_publish_msg& m) -> remote_published_msg {
        remote_published_msg out;
        const std::vector<FullTier*> t = tiers_of(m.tier);
        for (size_t r = 0; r < remotes.size(); ++r) {
          try {
            // Chunks the store holds from the first on are not sent again.
            const size_t first =
                m.skip_held ? std::max(m.first_chunk, remotes[r]->count_full(m.prompt, m.prompt.size()))
                            : m.first_chunk;
            const size_t n = remotes[r]->publish(m.prompt, first, *t[r], m.id);
            if (r == 0) out.chunks = n;
          } catch (const std::exception&) {
            // The entry was gone or unreadable: nothing published, nothing wrong.
          }
        }
        if (m.views.size() == remotes.size())  // each rank's view under its own keys
          for (size_t r = 0; r < remotes.size(); ++r) {
            const size_t n = remotes[r]->publish_compressed(m.prompt, m.first_view_chunk, *m.views[r],
                                                          m.view_spec);
            if (r == 0) out.compressed_chunks = n;
          }
        return out;
      },
      [ranks](bind_msg& m) {  // this actor's thread and the group's rank threads
        ranks->run([&](int) { m.binder->bind_calling_thread("fetcher", -1); });
        return true;
      },
  };
}

}  // namespace

RankViews join_segment(const RankViews& base, RankViews segment, RemoteCompressedFetch& f) {
  if (base.empty()) return segment;
  const size_t at = base.front()->covered();
  auto unused = [&](const std::string& why) {
    f.chunks = 0;
    f.positions = at;
    if (!why.empty()) f.stop_reason = "the compressed chunks from " + std::to_string(at) + " not joined: " + why;
    return base;
  };
  if (segment.empty()) return unused("");  // nothing found, or the ranks disagreed (f says)
  if (segment.size() != base.size()) return unused("a segment of another tensor-parallel degree");
  RankViews joined;
  for (size_t r = 0; r < base.size(); ++r) {
    auto j = std::make_shared<CompressedView>(*base[r]);
    std::string why;
    if (!j->append(*segment[r], why)) return unused(why);
    joined.push_back(std::move(j));
  }
  return joined;
}

caf::behavior net_fetcher(caf::event_based_actor*, std::shared_ptr<RemoteTier> remote) {
  return behavior_over({std::move(remote)}, {});
}

caf::behavior net_fetcher_group(caf::event_based_actor*,
                                std::vector<std::shared_ptr<RemoteTier>> remotes,
                                std::vector<FullTier*> tiers) {
  return behavior_over(std::move(remotes), std::move(tiers));
}

}  // namespace vc::actors
