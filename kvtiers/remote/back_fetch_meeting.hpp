// Where a prefill from a prefix's first chunk up meets a fetch of its cached chunks
// from the last one down (RemoteTier::fetch_back): shared by the two threads that
// run them (Generator's fetch thread, or the engine's net_fetcher and drafter).
//
//   fetcher: begin(layout) first (false: the front is done already, fetch nothing);
//            take(c, value) for each chunk that passed its checks (false once the
//            front has claimed c: the run ends there); deliver() once at the end;
//   front:   bind(tier, id) once the request's full-tier entry exists; claim(f)
//            before prefilling chunk f (false once the fetcher holds f); then
//            stop(), which reports the run the fetcher took: the front joins it
//            (FullTier::join_ahead) without waiting for the chunks in flight.
//
// A chunk taken after bind() goes straight into the entry, written ahead of the
// front (FullTier::write_blocks_ahead), so the fetch holds at most the batch it
// received (RemoteTierConfig::back_fetch_window chunks). Before bind() (the
// engine's drafter has not reached the request yet) taken chunks wait in memory, at most `hold_limit` bytes of them: a chunk past it
// waits for the bind (at most `bind_wait`, then the run ends there and the front
// computes what the fetch did not bring). A tier fault writing a chunk ends the run
// there too (the chunks before it stay); one at the bind drops the chunks held.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kvtiers/remote/remote_tier.hpp"

namespace vc {

/// Bytes of chunks a back fetch may hold in memory before its front binds it.
inline constexpr size_t kBackFetchHoldBytes = size_t(64) << 20;
/// How many batches apart the front and the fetch stay batching (batch_at).
inline constexpr size_t kBackFetchBatchGap = 3;
/// How long a fetch whose hold is full waits for the bind before its run ends.
inline constexpr std::chrono::milliseconds kBackFetchBindWait{5000};

class BackFetchMeeting {
 public:
  /// `chunks`: the prefix's whole chunks the two sides share (the fetch's limit), of
  /// `chunk_tokens` positions each.
  BackFetchMeeting(size_t chunks, size_t chunk_tokens, size_t hold_limit = kBackFetchHoldBytes,
                   std::chrono::milliseconds bind_wait = kBackFetchBindWait)
      : chunks_(chunks), chunk_tokens_(chunk_tokens), hold_limit_(hold_limit), bind_wait_(bind_wait),
        lowest_(chunks) {}

  [[nodiscard]] size_t chunks() const { return chunks_; }
  [[nodiscard]] size_t chunk_tokens() const { return chunk_tokens_; }

  // The fetcher's side.
  /// The layout of the chunks to come; false when the front has stopped already
  /// (nothing is wanted: do not fetch).
  bool begin(const ChunkLayout& layout);
  /// Chunk c arrived whole (its value, and where its payload starts): true keeps it
  /// (written ahead into the bound entry, or held until bind()), false when the
  /// front has claimed c or stopped, when the hold stayed full past the bind wait,
  /// or when writing it into the entry failed (refusal() says why).
  bool take(size_t c, std::string&& value, size_t payload_offset);
  /// The fetch's counts (its values, if any, are not used); only the first call
  /// counts (a net_fetcher's failure may deliver an empty run).
  void deliver(RemoteBackFetch run);
  /// Why take() last refused a chunk other than for the front ("" if it did not).
  [[nodiscard]] std::string refusal() const;
  /// A tensor-parallel group keeps only the chunks every rank holds: once another
  /// rank's run has ended at chunk c (or taken none: c = chunks()), chunks below c
  /// are of no use here and take() refuses them, `why` its refusal.
  void keep_above(size_t c, const std::string& why);

  // The front's side.
  /// The request's entry in `tier` (created, holding no more than the front has
  /// prefilled): the chunks held so far are written ahead into it, and every later
  /// one as it is taken. On a tier fault the run is dropped and ends (the front
  /// computes the prefix; refusal() says why).
  void bind(FullTier& tier, uint64_t id);
  /// Whether the fetcher does not hold chunk f: then f is the front's (the fetcher
  /// takes nothing at or below it). False also once f is past the last chunk.
  bool claim(size_t f);
  /// Whether the fetcher holds chunk c (a query; claims nothing).
  [[nodiscard]] bool holds(size_t c) const { return c < chunks_ && lowest_.load() <= c; }
  /// The fetcher's next batch, from chunk `top` down: `window` chunks while the front
  /// is far below (at least kBackFetchBatchGap batches), one near it, where a batch
  /// would bring chunks the front computes meanwhile (and `generate` waits for it),
  /// or near the floor keep_above() set.
  [[nodiscard]] size_t batch_at(size_t top, size_t window) const;
  /// The front takes nothing more, and the fetcher nothing more: the run the
  /// fetcher took, [first, end) from the last chunk down without a gap (values,
  /// ascending, only for chunks still held because bind() was never called; empty
  /// run when it took none).
  RemoteBackFetch stop();
  /// Blocks until deliver().
  const RemoteBackFetch& wait();
  /// The delivered counts, when in (else null).
  [[nodiscard]] const RemoteBackFetch* delivered() const;
  /// The layout begin() gave (empty before).
  [[nodiscard]] ChunkLayout layout() const;
  /// Bytes of chunk values held in memory now (taken before bind()).
  [[nodiscard]] size_t held_bytes() const;

 private:
  /// The run ends: nothing more is taken, `why` says so.
  void end_run(std::string why);

  const size_t chunks_, chunk_tokens_, hold_limit_;
  const std::chrono::milliseconds bind_wait_;
  std::atomic<size_t> lowest_;  // the fetcher's lowest chunk (chunks_: none)
  mutable std::mutex mu_;
  std::condition_variable cv_;
  size_t claimed_ = 0;  // chunks [0, claimed_) are the front's
  size_t floor_ = 0;    // chunks below it are of no use (keep_above)
  std::string floor_why_;
  bool stopped_ = false;
  bool ended_ = false;  // the run ended on the fetcher's side (end_run)
  ChunkLayout layout_;
  FullTier* tier_ = nullptr;
  uint64_t id_ = 0;
  RemoteBackFetch run_taken_;  // first, end, bytes; values only while unbound
  size_t held_bytes_ = 0;
  std::string refusal_;
  std::optional<RemoteBackFetch> run_;
};

/// A request's meetings, one per tensor-parallel rank (its KV heads' chunks).
using RankMeetings = std::vector<std::shared_ptr<BackFetchMeeting>>;

/// The fetcher's whole part: fetch_back() of `tokens` (at most `max_positions`) into
/// `meeting`, then deliver(); fetches nothing when the front is done already. Never
/// throws (a failure is a run with nothing and its reason).
void fetch_back_into(RemoteTier& remote, std::span<const int32_t> tokens, size_t max_positions,
                     BackFetchMeeting& meeting);

/// What a prefill that met a back fetch covered (meet_back_fetch()).
struct MetPrefix {
  size_t front_chunks = 0;   // chunks [0, front_chunks) prefilled locally
  size_t fetched_chunks = 0; // chunks appended from the back run after them
  /// The first chunk the store may lack (to publish), when publish_known; else the
  /// store was not heard from before the front was done: publish from 0, skipping
  /// the chunks the store holds (remote_publish's skip_held).
  size_t publish_from = 0;
  bool publish_known = true;
  /// The fetch's counts: those delivered, or, when the fetch had not ended, those of
  /// the chunks it held (bytes) with an empty reason.
  RemoteBackFetch run;
  [[nodiscard]] size_t cached_chunks() const { return front_chunks + fetched_chunks; }
};

/// Tensor parallelism: how the ranks of a group agree (each rank has a meeting of
/// its own, over its KV heads' chunks; their fronts prefill together, in
/// collectives). Every rank calls them in the same order.
struct MeetingRanks {
  std::function<bool(bool mine)> any;      // true when any rank's is
  std::function<size_t(size_t mine)> min;  // the least over the ranks
};

/// The front's whole part: binds the meeting to request `id` of `tier`, prefills
/// chunks from the first up through `prefill_chunk(f)` (which appends chunk f to
/// the entry) while the back run has not reached them, then joins the run written
/// ahead above the last one it took. It never waits for the chunks in flight; with
/// `wait_for_run` (a fetcher that started with the front) it waits for the fetch's
/// end (its batch in flight) to report its counts. A throwing prefill stops the
/// fetcher. With `ranks` (a group), the fronts go on while any rank's fetcher does not hold the next chunk
/// (a rank whose fetcher does prefills it over its run), and every rank keeps the
/// chunks all of them hold (the fewest), so that their prefixes stay equal.
[[nodiscard]] MetPrefix meet_back_fetch(BackFetchMeeting& meeting,
                                        const std::function<void(size_t chunk)>& prefill_chunk,
                                        FullTier& tier, uint64_t id, bool wait_for_run,
                                        const MeetingRanks* ranks = nullptr);

}  // namespace vc
