// The resource actors: drafter (fast memory + compute for drafting), mover (the
// link: full-tier reads and writes), verifier (compute for verify passes). Each is
// a thin behavior over a plain object from runtime/; each runs detached (its own
// thread), since each owns a resource that blocks while it works.
//
// Tensor parallelism: one actor of each kind per group drives every rank (the
// *_group behaviors); the single-object behaviors are the degree-1 case.
#pragma once
#include <memory>

#include <caf/all.hpp>

#include "runtime/draft_batcher.hpp"
#include "runtime/layer_streamer.hpp"
#include "runtime/trace.hpp"
#include "runtime/tp_draft_batcher.hpp"
#include "runtime/tp_verifier.hpp"
#include "runtime/verifier.hpp"

namespace vc::actors {

/// Handles prefill_msg, finish_prefill_msg, draft_msg, commit_msg, release_msg,
/// release_tier_msg, step_msg; reports to
/// `scheduler`. `slice_prefill` (EngineConfig::slice_prefill): a prompt's prefill
/// runs a chunk at a time (DraftSpec::prefill_chunk), the draft steps of the
/// requests already decoding and the other prefills in between (a release_msg or
/// release_tier_msg for a request in prefill stops it; nothing of it is kept);
/// else each prefill runs whole before the next message.
caf::behavior drafter(caf::event_based_actor* self, std::shared_ptr<DraftBatcher> batcher,
                      caf::actor scheduler, std::shared_ptr<TraceRecorder> trace,
                      bool slice_prefill = true);

/// The drafter of a tensor-parallel group: every message runs on all its ranks.
/// A sliced prefill runs one task per rank (the ranks meet in collectives inside a
/// chunk, so each slice runs every rank's at once, and every rank yields before the
/// same chunk).
caf::behavior drafter_group(caf::event_based_actor* self, std::shared_ptr<TpDraftBatcher> batcher,
                            caf::actor scheduler, std::shared_ptr<TraceRecorder> trace,
                            bool slice_prefill = true);

/// Handles stream_msg (replies with the streamers; one job at a time), commit_msg,
/// release_msg.
caf::behavior mover(caf::event_based_actor* self, FullTier* tier,
                    std::shared_ptr<LayerStreamer> streamer, std::shared_ptr<TraceRecorder> trace);

/// The mover of a group: tiers[r] holds rank r's KV heads, lanes[k].ranks[r]
/// streams from it (a stream_msg of n jobs takes lanes 0..n-1, so at most
/// lanes.size() requests share a verify pass); a commit writes each rank's
/// verified rows to its own tier, the ranks at once (one thread per rank, kept
/// between commits).
caf::behavior mover_group(caf::event_based_actor* self, std::vector<FullTier*> tiers,
                          StreamerLanes lanes, std::shared_ptr<TraceRecorder> trace);

/// Handles verify_msg: asks `mover` to stream, runs the pass, sends commit_msg to
/// the mover and verified_msg (or failed_msg) to `scheduler`.
caf::behavior verifier(caf::event_based_actor* self, std::shared_ptr<Verifier> v,
                       caf::actor mover, caf::actor scheduler,
                       std::shared_ptr<TraceRecorder> trace);

/// The verifier of a group: the pass runs on every rank at once. Verify jobs that
/// wait while a pass runs share the next pass, up to `max_batch` of them (the
/// mover's lanes): one forward reads the weights once for all their rows, each
/// request's rows over its own full KV (Verifier::run_batch; outcomes bit for bit
/// those of passes alone). A job that gathers statistics runs alone; when a
/// batched pass fails, its jobs run again one by one, so a failure reaches the
/// one request concerned.
caf::behavior verifier_group(caf::event_based_actor* self, std::shared_ptr<TpVerifier> v,
                             caf::actor mover, caf::actor scheduler,
                             std::shared_ptr<TraceRecorder> trace, size_t max_batch = 1);

}  // namespace vc::actors
