// Where a prefill from a prefix's first chunk up meets a fetch of its cached chunks
// from the last one down (RemoteTier::fetch_back): shared by the two threads that
// run them (Generator's fetch thread, or the engine's net_fetcher and drafter).
//
//   fetcher: wanted(c) after chunk c passed its checks (false once the front has
//            taken c: its run ends there), then deliver() once with the run;
//   front:   may_take(f) before prefilling chunk f (false once the run reaches f),
//            took(f + 1) after it, stop() when it is done or failed;
//            wait() for the run only when it has claimed a chunk (claimed()): then
//            the fetcher is at work and ends within one chunk's transfer.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <optional>
#include <string>

#include "kvtiers/remote/remote_tier.hpp"

namespace vc {

class BackFetchMeeting {
 public:
  /// `chunks`: the prefix's whole chunks the two sides share (the fetch's limit), of
  /// `chunk_tokens` positions each.
  BackFetchMeeting(size_t chunks, size_t chunk_tokens)
      : chunks_(chunks), chunk_tokens_(chunk_tokens), lowest_(chunks) {}

  [[nodiscard]] size_t chunks() const { return chunks_; }
  [[nodiscard]] size_t chunk_tokens() const { return chunk_tokens_; }

  // The fetcher's side.
  /// Chunk c arrived whole: true claims it (the front stops below it), false when
  /// the front has taken it already.
  bool wanted(size_t c);
  /// The fetch's run (its values kept for append()) and the layout of its chunks;
  /// only the first call counts (a net_fetcher's failure may deliver an empty run).
  void deliver(RemoteBackFetch run, const ChunkLayout& layout);

  // The front's side.
  [[nodiscard]] bool may_take(size_t f) const { return f < chunks_ && lowest_.load() > f; }
  void took(size_t front) { front_.store(front); }
  /// The front takes nothing more: a fetcher still running stops at its next chunk.
  void stop() { front_.store(chunks_); }
  /// The fetcher has claimed a chunk (so it is at work and ends soon).
  [[nodiscard]] bool claimed() const { return lowest_.load() < chunks_; }
  /// Blocks until deliver().
  const RemoteBackFetch& wait();
  /// The run, when delivered already (else null).
  [[nodiscard]] const RemoteBackFetch* delivered() const;
  /// Appends the run's chunks [from, end) to request `id` of `tier` (holding exactly
  /// `from` chunks); after wait().
  void append(size_t from, FullTier& tier, uint64_t id) const;
  /// Frees the run's values (the counts stay).
  void drop_values();

 private:
  const size_t chunks_, chunk_tokens_;
  std::atomic<size_t> front_{0}, lowest_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::optional<RemoteBackFetch> run_;
  ChunkLayout layout_;
};

/// What a prefill that met a back fetch covered (meet_back_fetch()).
struct MetPrefix {
  size_t front_chunks = 0;   // chunks [0, front_chunks) prefilled locally
  size_t fetched_chunks = 0; // chunks appended from the back run after them
  size_t publish_from = 0;   // the first chunk the store may lack (to publish)
  /// The run as delivered (its values dropped), when the front waited for it or it
  /// was in; else a run with nothing fetched, reason "not in yet".
  RemoteBackFetch run;
  [[nodiscard]] size_t cached_chunks() const { return front_chunks + fetched_chunks; }
};

/// The front's whole part: prefills chunks from the first up through
/// `prefill_chunk(f)` (which appends chunk f to request `id` of `tier`) while the
/// back run has not reached them, then appends the run's chunks above the last one
/// it took. When the run has not claimed a chunk by then (the fetcher had not
/// started, or found nothing), the front took every chunk, and the run is waited
/// for only with `wait_for_run` (a fetcher that started with the front; a queued
/// net_fetcher may start much later): without it, publish_from is the run's if it
/// was delivered already, else 0 (the publisher skips chunks the store holds). A
/// throwing prefill stops the fetcher.
[[nodiscard]] MetPrefix meet_back_fetch(BackFetchMeeting& meeting,
                                        const std::function<void(size_t chunk)>& prefill_chunk,
                                        FullTier& tier, uint64_t id, bool wait_for_run);

}  // namespace vc
