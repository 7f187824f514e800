// Every message that crosses an actor mailbox, with who sends it, who handles it and
// how often. Per-token and per-layer work never goes through a mailbox: the drafter
// batches steps internally, and layer-ready signals between the mover's copy thread
// and the verifier are condition variables inside LayerStreamer (the CPU stand-in
// for CUDA events).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include <caf/all.hpp>

#include "kvtiers/remote/remote_tier.hpp"
#include "runtime/draft_batcher.hpp"
#include "runtime/layer_streamer.hpp"
#include "runtime/tp_verifier.hpp"
#include "runtime/verifier.hpp"
#include "topology/placement_binder.hpp"

namespace vc::actors {

struct RequestCtx;  // the scheduler's per-request state (scheduler.hpp)

/// client -> scheduler, once per request: admit it (or answer "overloaded").
struct submit_msg {
  std::shared_ptr<RequestCtx> ctx;
};
/// client -> scheduler: cancel a request wherever it is.
struct cancel_msg {
  uint64_t id = 0;
};
/// scheduler -> drafter, once per request: prefill, compress, copy the full KV to
/// the full tier. Answered by prefilled_msg or failed_msg.
struct prefill_msg {
  DraftSpec spec;
};
/// drafter -> scheduler, once per request.
struct prefilled_msg {
  PrefillResult result;
};
/// drafter (its prefilling thread) -> scheduler, a lossy or vericache request's first
/// token once the prompt's exact logits exist, before prefilled_msg (whose token is
/// the same): emitted at once, not after the view is built.
struct first_token_msg {
  uint64_t id = 0;
  int32_t token = 0;
  float logprob = 0;
  std::vector<TokenLogprob> top_logprobs;
};
/// scheduler -> drafter, once per round: draft (or, in full/lossy mode, decode)
/// `n` tokens from the pending token. Answered by drafted_msg when the block is done.
struct draft_msg {
  uint64_t id = 0;
  size_t n = 0;
  bool ahead = false;  // DraftBatcher::start: compressed first, drafting further ahead
};
/// drafter -> scheduler, once per round.
struct drafted_msg {
  DraftBlock block;
};
/// scheduler -> verifier, once per round: verify the drafts against the full KV.
/// Answered by verified_msg or failed_msg.
struct verify_msg {
  VerifyJob job;
};
/// One request's full KV to stream for a verify pass.
struct StreamJob {
  uint64_t id = 0;
  size_t n_full = 0, n_rows = 0;
  bool whole_layers = false;  // the pass gathers statistics that read whole layers
};
/// verifier -> mover, once per verify pass (of one or several requests): start
/// streaming each request's full KV, layer by layer, into the staging buffers of a
/// lane of its own (each rank's from its own tier); answered with the lanes'
/// streamers (StreamerLanes: jobs[j]'s in lanes[j], one streamer per rank).
struct stream_msg {
  std::vector<StreamJob> jobs;
};
/// verifier -> itself: run a pass over the jobs waiting (see verifier_group).
struct verify_now_msg {};
/// verifier -> scheduler, once per round.
struct verified_msg {
  std::shared_ptr<const VerifyOutcome> outcome;
};
/// verifier -> mover and scheduler -> drafter, once per round: the verified KV of
/// the accepted positions (the mover appends it to the full tier, the drafter puts
/// it over the drafts' KV and rolls back the rest).
struct commit_msg {
  std::shared_ptr<const VerifyOutcome> outcome;
  size_t p0 = 0;
  size_t ahead = 0;  // drafter: DraftBatcher::commit's drafts kept ahead (the mover ignores it)
  caf::actor failures_to = {};  // mover: where a failed commit is reported (failed_msg), if set
};
/// scheduler -> drafter and mover, once per request: free everything it holds.
struct release_msg {
  uint64_t id = 0;
};
/// any worker -> scheduler: the request failed (its error, it alone).
struct failed_msg {
  uint64_t id = 0;
  std::string error;
};
/// scheduler -> drafter, for a request whose full-tier entry the drafter created
/// for the scheduler (recompute front): forward release_msg{id} to `mover` (after
/// the prefill that created it, which this drafter ran first).
struct release_tier_msg {
  uint64_t id = 0;
  caf::actor mover;
};
/// drafter -> itself after each batched step while requests are drafting, so other
/// messages interleave with steps.
struct step_msg {};
/// drafter -> itself after each slice of request `id`'s prefill (a chunk of its
/// prompt), so other messages interleave with the prefill's chunks.
struct prefill_slice_msg {
  uint64_t id = 0;
};
/// engine -> scheduler, once at the end: cancel everything, drop the worker
/// handles; replies true.
struct shutdown_msg {};
/// scheduler -> net_fetcher, for each lossy or vericache request at admission when
/// a remote store is configured, a few chunks at a time: append the longest cached
/// prefix of `prompt` (at most `max_positions`) from `from_positions` on to request
/// `id` of `tier` (holding exactly `from_positions`; created first with room for
/// `create_positions` when that is > 0). Answered by remote_fetched_msg; a store
/// fault is a short or empty prefix with its reason, never an error.
struct remote_fetch_msg {
  uint64_t id = 0;
  std::vector<int32_t> prompt;
  size_t from_positions = 0;
  size_t max_positions = 0;
  FullTier* tier = nullptr;
  size_t create_positions = 0;
};
/// net_fetcher -> the sender of remote_fetch_msg. `error`: the tier entry could not
/// be created or written (a tier fault, not a store fault; nothing was kept).
struct remote_fetched_msg {
  uint64_t id = 0;
  RemoteFetch fetch;
  std::string error;
};
/// scheduler -> net_fetcher, for a request of the full flow with
/// EngineConfig::remote_recompute_front (any degree: one meeting per rank): fetch the cached chunks of
/// `prompt` (at most `max_positions`) from the last one down, meeting the drafter's
/// prefill from the front through `meeting` (fetch_back_into): the drafter creates
/// the entry and binds the meeting to it, and from then on each chunk taken is
/// written into the entry ahead of the front (before, at most the meeting's hold
/// limit waits in memory).
/// Answered by true once delivered.
struct remote_fetch_back_msg {
  uint64_t id = 0;
  std::vector<int32_t> prompt;
  size_t max_positions = 0;
  RankMeetings meetings;  // rank r's fetch meets rank r's front
};
/// scheduler -> net_fetcher, once per request after its prefill (when the prompt
/// has complete chunks): queue for write-behind publishing the prompt's full chunks
/// from `first_chunk` on (the ones the store lacked, read from request `id` of
/// `tier` now) and, with `view`, the compressed form of its chunks from
/// `first_view_chunk` on (each chunk's slice of the view, keyed by `view_spec`, see
/// compressor_spec()): the chunks a compressed-first request did not fetch.
/// Answered by remote_published_msg.
struct remote_publish_msg {
  uint64_t id = 0;
  std::vector<int32_t> prompt;
  size_t first_chunk = 0;
  FullTier* tier = nullptr;
  RankViews views;  // per rank: its compressed chunks too (empty: full chunks only)
  std::string view_spec;
  size_t first_view_chunk = 0;
  /// The store's holdings were not known (recompute front, its fetch not heard
  /// from): the full chunks it holds from the first on (counted) are skipped.
  bool skip_held = false;
};
/// net_fetcher -> the sender of remote_publish_msg: the chunks queued (0 full
/// chunks after a tier fault: the entry was gone or unreadable).
struct remote_published_msg {
  size_t chunks = 0, compressed_chunks = 0;
};
/// scheduler -> net_fetcher, once per compressed-first request at admission (lossy
/// and vericache with a store and EngineConfig::remote_compressed_first): fetch the
/// longest cached compressed prefix of `prompt` (at most `max_positions`) keyed by
/// `spec` (compressor_spec()). Answered by remote_compressed_fetched_msg; a store
/// fault is a short or empty prefix with its reason.
struct remote_fetch_compressed_msg {
  uint64_t id = 0;
  std::vector<int32_t> prompt;
  size_t from_positions = 0;  // a segment: the chunks from here on (RemoteTier::fetch_compressed)
  size_t max_positions = 0;
  std::string spec;
  RankViews base;  // per rank, the view of [0, from_positions) the segment is joined onto
  /// First segment: when the store's compressed prefix (counted first, no value
  /// read) would leave a suffix longer than this, fetch nothing (0: no limit).
  size_t max_suffix = 0;
};
/// net_fetcher -> the sender of remote_fetch_compressed_msg: per rank, its chunks'
/// views joined, onto the message's `base` (empty when none was found, or the
/// ranks' prefixes differed; `base` when the segment brought nothing usable), and
/// the segment's counts (its view moved out; chunks 0 when it was not used).
struct remote_compressed_fetched_msg {
  uint64_t id = 0;
  RankViews views;
  RemoteCompressedFetch fetch;
};
/// scheduler -> drafter, once per compressed-first vericache request, when its full
/// chunks are in the tier and no block of it is in flight: prefill the rest exactly
/// (DraftBatcher::finish_prefill). Answered by prefill_finished_msg or failed_msg.
struct finish_prefill_msg {
  uint64_t id = 0;
  size_t cached = 0;  // prompt positions the full tier holds from the store
};
/// drafter -> scheduler: the exact first token, and whether the drafts of the block
/// drafted from the guess stand.
struct prefill_finished_msg {
  PrefillResult result;
};
/// engine -> scheduler, once at start: the worker actors (spawned after it);
/// net_fetchers is empty when no remote store is configured (else a pool: each
/// fetch or publish goes to the one with the fewest outstanding).
struct wire_msg {
  caf::actor drafter, verifier, mover;
  std::vector<caf::actor> net_fetchers;
};
/// engine -> drafter, verifier, mover and each net_fetcher, once at start when a
/// placement is applied (EngineConfig::placement): bind every thread the actor owns
/// through `binder`; answered with true once they are bound.
struct bind_msg {
  std::shared_ptr<PlacementBinder> binder;
};

}  // namespace vc::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vc::actors::submit_msg)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vc::actors::bind_msg)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vc::actors::cancel_msg)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vc::actors::prefill_msg)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vc::actors::prefilled_msg)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vc::actors::first_token_msg)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vc::actors::draft_msg)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vc::actors::drafted_msg)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vc::actors::verify_msg)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vc::actors::stream_msg)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vc::actors::verified_msg)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vc::actors::commit_msg)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vc::actors::release_msg)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vc::actors::release_tier_msg)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vc::actors::failed_msg)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vc::actors::step_msg)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vc::actors::prefill_slice_msg)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vc::actors::wire_msg)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vc::actors::shutdown_msg)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vc::actors::remote_fetch_msg)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vc::actors::remote_fetched_msg)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vc::actors::remote_fetch_back_msg)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vc::actors::remote_publish_msg)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vc::actors::remote_published_msg)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vc::actors::remote_fetch_compressed_msg)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vc::actors::remote_compressed_fetched_msg)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vc::actors::finish_prefill_msg)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vc::actors::prefill_finished_msg)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<vc::LayerStreamer>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<vc::StreamerGroup>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vc::StreamerLanes)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(vc::actors::verify_now_msg)
