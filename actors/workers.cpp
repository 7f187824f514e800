// Drafter, mover and verifier behaviors: each delegates to its plain object and
// turns exceptions into failed_msg for the one request concerned.
#include "actors/workers.hpp"

#include <array>

#include "actors/protocol.hpp"
#include "runtime/rank_group.hpp"
#include "runtime/tp_comm.hpp"

namespace vc::actors {

caf::behavior drafter(caf::event_based_actor* self, std::shared_ptr<DraftBatcher> batcher,
                      caf::actor scheduler, std::shared_ptr<TraceRecorder> trace) {
  return drafter_group(self, std::make_shared<TpDraftBatcher>(std::move(batcher)),
                       std::move(scheduler), std::move(trace));
}

caf::behavior drafter_group(caf::event_based_actor* self, std::shared_ptr<TpDraftBatcher> batcher,
                            caf::actor scheduler, std::shared_ptr<TraceRecorder> trace) {
  const int track = trace->track("drafter");
  auto stepping = std::make_shared<bool>(false);
  auto kick = [=] {  // keep one step_msg in flight while anything drafts
    if (!*stepping && batcher->busy()) {
      *stepping = true;
      self->send(self, step_msg{});
    }
  };
  return {
      [=](prefill_msg& m) {
        try {
          auto s = trace->scope(track, "prefill", m.spec.id);
          self->send(scheduler, prefilled_msg{batcher->prefill(m.spec)});
        } catch (const std::exception& e) {
          self->send(scheduler, failed_msg{m.spec.id, e.what()});
        }
      },
      [=](draft_msg& m) {
        try {
          batcher->start(m.id, m.n);
          kick();
        } catch (const std::exception& e) {
          self->send(scheduler, failed_msg{m.id, e.what()});
        }
      },
      [=](step_msg&) {
        *stepping = false;
        std::vector<uint64_t> ids;
        const auto b = TraceRecorder::clock::now();
        std::vector<DraftBlock> done;
        try {
          done = batcher->step();
        } catch (const std::exception& e) {
          // A step failure cannot be pinned on one row: fail every drafting request.
          for (uint64_t id : batcher->active()) self->send(scheduler, failed_msg{id, e.what()});
          return;
        }
        const size_t rows = batcher->last_step_rows();
        if (rows > 0)
          trace->slice(track, "draft step", batcher->last_step_ids(), b,
                       TraceRecorder::clock::now(), {{"rows", double(rows)}});
        for (auto& blk : done) self->send(scheduler, drafted_msg{std::move(blk)});
        kick();
      },
      [=](finish_prefill_msg& m) {
        try {
          auto s = trace->scope(track, "exact prefill", m.id);
          self->send(scheduler, prefill_finished_msg{batcher->finish_prefill(m.id, m.cached)});
        } catch (const std::exception& e) {
          self->send(scheduler, failed_msg{m.id, e.what()});
        }
      },
      [=](commit_msg& m) {
        try {
          batcher->commit(m.outcome->id, *m.outcome);
        } catch (const std::exception& e) {
          self->send(scheduler, failed_msg{m.outcome->id, e.what()});
        }
      },
      [=](release_msg& m) {
        try {
          batcher->release(m.id);
        } catch (const std::exception&) {
          // Freeing never fails for a known request; an unknown one is a no-op.
        }
      },
      [=](bind_msg& m) {  // every rank's compute threads (rank 0's first: this one)
        batcher->run_on_each_thread([&](int rank, int) { m.binder->bind_calling_thread("drafter", rank); });
        return true;
      },
  };
}

caf::behavior mover(caf::event_based_actor* self, FullTier* tier,
                    std::shared_ptr<LayerStreamer> streamer, std::shared_ptr<TraceRecorder> trace) {
  auto group = std::make_shared<StreamerGroup>();
  group->ranks.push_back(std::move(streamer));
  return mover_group(self, {tier}, std::move(group), std::move(trace));
}

caf::behavior mover_group(caf::event_based_actor* self, std::vector<FullTier*> tiers,
                          std::shared_ptr<StreamerGroup> streamers,
                          std::shared_ptr<TraceRecorder> trace) {
  (void)self;
  const int track = trace->track("mover");
  // The ranks' commits run at once, each rank's rows to its own tier (its own link).
  const int degree = int(tiers.size());
  auto ranks = std::make_shared<RankGroup>(
      degree > 1 ? std::make_shared<CpuCommunicator>(degree) : nullptr);
  for (size_t rank = 0; rank < streamers->ranks.size(); ++rank) {
    const std::string prefix = rank == 0 ? "" : "rank " + std::to_string(rank) + " ";
    streamers->ranks[rank]->set_layer_observer(
        [trace, track, prefix](uint64_t id, size_t layer, auto b, auto e, size_t bytes) {
          const std::array<uint64_t, 1> ids{id};
          trace->slice(track, prefix + "layer " + std::to_string(layer) + " transfer", ids, b, e,
                       {{"bytes", double(bytes)}});
        });
  }
  return {
      [=](stream_msg& m) -> std::shared_ptr<StreamerGroup> {
        // Each rank's streamer reads its own tier on its own copy thread: the ranks'
        // links run at once.
        for (auto& s : streamers->ranks) s->start(m.id, m.n_full, m.n_rows, m.whole_layers);
        return streamers;
      },
      [=](commit_msg& m) {
        const VerifyOutcome& v = *m.outcome;
        auto s = trace->scope(track, "commit", v.id);
        try {
          ranks->run([&](int rank) {
            const VerifyOutcome& o = rank_outcome(v, rank, degree);
            FullTier* tier = tiers[size_t(rank)];
            const size_t layers = tier->config().num_layers;
            for (size_t r = 0; r <= o.accepted; ++r)
              for (size_t l = 0; l < layers; ++l)
                tier->write(o.id, l, m.p0 + r, o.k(l, r), o.v(l, r));
          });
        } catch (const std::exception&) {
          // The request was cancelled (released) meanwhile, or its tier failed: the
          // next verify pass reports a failure for it alone.
        }
      },
      [=](release_msg& m) {
        for (FullTier* tier : tiers) tier->release_if_present(m.id);
      },
      [=](bind_msg& m) {  // the rank threads (commits) and each rank's copy thread
        ranks->run([&](int rank) { m.binder->bind_calling_thread("mover", rank); });
        for (size_t rank = 0; rank < streamers->ranks.size(); ++rank)
          m.binder->bind_thread(streamers->ranks[rank]->copy_thread(), "mover", int(rank));
        return true;
      },
  };
}

caf::behavior verifier(caf::event_based_actor* self, std::shared_ptr<Verifier> v,
                       caf::actor mover, caf::actor scheduler,
                       std::shared_ptr<TraceRecorder> trace) {
  return verifier_group(self, std::make_shared<TpVerifier>(std::move(v)), std::move(mover),
                        std::move(scheduler), std::move(trace));
}

caf::behavior verifier_group(caf::event_based_actor* self, std::shared_ptr<TpVerifier> v,
                             caf::actor mover, caf::actor scheduler,
                             std::shared_ptr<TraceRecorder> trace) {
  const int track = trace->track("verifier");
  return {
      [=](verify_msg& m) {
        const VerifyJob job = m.job;
        // Blocking request: this actor owns the verify compute and has nothing else
        // to do until its pass can start.
        self->request(mover, caf::infinite,
                      stream_msg{job.id, job.p0, job.drafts.size() + 1})
            .await(
                [=](std::shared_ptr<StreamerGroup> stream) {
                  try {
                    auto s = trace->scope(track, "verify pass", job.id);
                    std::shared_ptr<const VerifyOutcome> out = v->run(job, *stream);
                    self->send(mover, commit_msg{out, job.p0});
                    self->send(scheduler, verified_msg{out});
                  } catch (const std::exception& e) {
                    self->send(scheduler, failed_msg{job.id, e.what()});
                  }
                },
                [=](caf::error& err) {
                  self->send(scheduler, failed_msg{job.id, "verify: mover: " + to_string(err)});
                });
      },
      [=](bind_msg& m) {
        v->run_on_each_thread([&](int rank, int) { m.binder->bind_calling_thread("verifier", rank); });
        return true;
      },
  };
}

}  // namespace vc::actors
