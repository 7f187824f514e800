// Drafter, mover and verifier behaviors: each delegates to its plain object and
// turns exceptions into failed_msg for the one request concerned.
#include "actors/workers.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <deque>
#include <map>
#include <string>
#include <optional>

#include "actors/protocol.hpp"
#include "actors/sliced_task.hpp"
#include "kernels/error.hpp"
#include "runtime/rank_group.hpp"
#include "runtime/tp_comm.hpp"

namespace vc::actors {

caf::behavior drafter(caf::event_based_actor* self, std::shared_ptr<DraftBatcher> batcher,
                      caf::actor scheduler, std::shared_ptr<TraceRecorder> trace,
                      bool slice_prefill) {
  return drafter_group(self, std::make_shared<TpDraftBatcher>(std::move(batcher)),
                       std::move(scheduler), std::move(trace), slice_prefill);
}

namespace {

/// The drafter's prefills in flight, each run by SlicedTasks that yield before each chunk
/// of its prompt (Workspace::chunk_hook), so that draft steps (and the other
/// prefills) run between its chunks instead of waiting for all of it. A full-mode
/// prompt waits for the full-mode one in flight, so that it shares that prompt's
/// prefix blocks as it would after it (PagedKvCache::share_prefix). A view's
/// rebuild during decoding (a fold, DraftBatcher::fold) runs the same way, a layer
/// per slice, and so does a compressed-first request's exact prefill of its suffix
/// (DraftBatcher::finish_prefill), a chunk per slice; the request takes no step
/// meanwhile, and a draft_msg or commit_msg for it waits.
struct PrefillSlices {
  /// One task per tensor-parallel rank: each rank's prefill on a thread of its own
  /// (the ranks meet in collectives inside a chunk, so their slices run at once,
  /// and every rank yields before the same chunk).
  struct Job {
    std::vector<std::unique_ptr<SlicedTask>> tasks;
    std::shared_ptr<std::vector<std::optional<PrefillResult>>> results;
    bool full = false;
    /// prefill: DraftBatcher::prefill; fold: a view's rebuild; finish: the exact
    /// prefill of a compressed-first request (finish_prefill).
    enum class Kind { prefill, fold, finish } kind = Kind::prefill;
    /// The request's draft_msg and commit_msg that came meanwhile, run in order once
    /// it ends.
    std::vector<std::function<void()>> deferred;
    [[nodiscard]] const char* what() const {
      return kind == Kind::fold ? "view rebuild" : kind == Kind::finish ? "exact prefill" : "prefill";
    }
    double seconds = 0;  // inside its slices (PrefillResult::seconds: the drafter's time)
  };
  std::map<uint64_t, Job> jobs;
  std::deque<DraftSpec> waiting;  // full-mode prompts
  std::shared_ptr<PlacementBinder> binder;  // bind_msg's, for the tasks' threads
  [[nodiscard]] bool full_in_flight() const {
    for (const auto& [id, j] : jobs)
      if (j.full) return true;
    return false;
  }
  /// Drops request `id`'s prefill, in flight (cancelled: its cleanups run) or waiting;
  /// true when it was the full-mode one in flight (the next waiting one may start).
  bool drop(uint64_t id) {
    std::erase_if(waiting, [&](const DraftSpec& s) { return s.id == id; });
    auto it = jobs.find(id);
    if (it == jobs.end()) return false;
    const bool full = it->second.full;
    jobs.erase(it);
    return full;
  }
};

}  // namespace

caf::behavior drafter_group(caf::event_based_actor* self, std::shared_ptr<TpDraftBatcher> batcher,
                            caf::actor scheduler, std::shared_ptr<TraceRecorder> trace,
                            bool slice_prefill) {
  const int track = trace->track("drafter");
  auto stepping = std::make_shared<bool>(false);
  auto kick = [=] {  // keep one step_msg in flight while anything drafts
    if (!*stepping && batcher->busy()) {
      *stepping = true;
      self->send(self, step_msg{});
    }
  };
  batcher->set_stream_final(true);  // full and lossy tokens go out as each step makes them
  // Every rank yields before the same chunk; at degree > 1 they meet first, so a rank
  // out of step fails the prefill instead of hanging the group (the batcher owns the
  // hook: a raw pointer, no cycle).
  if (slice_prefill)
    batcher->set_chunk_hook([b = batcher.get()](int rank) {
      if (!SlicedTask::in_task()) return;  // a prefill run whole
      b->align(rank);
      SlicedTask::yield();
    });
  const int degree = batcher->degree();
  auto slices = std::make_shared<PrefillSlices>();
  auto run_slice = std::make_shared<std::function<void(uint64_t)>>();
  // Starts request `id`'s job: work(r) on every rank r, each on a task of its own
  // (the ranks meet in collectives, so every rank's slice runs at once).
  auto start_job = [=, run = run_slice.get()](uint64_t id, PrefillSlices::Job job,  // no cycle
                                              std::function<void(DraftBatcher&, int rank)> work) {
    for (int r = 0; r < degree; ++r)
      job.tasks.push_back(std::make_unique<SlicedTask>([batcher, r, work, binder = slices->binder] {
        if (binder) binder->bind_calling_thread("drafter", r);
        work(batcher->rank(r), r);
      }));
    slices->jobs.emplace(id, std::move(job));
    (*run)(id);
  };
  auto launch = [=](DraftSpec spec) {
    const uint64_t id = spec.id;
    PrefillSlices::Job job;
    job.full = spec.mode == DecodeMode::full;
    auto results = std::make_shared<std::vector<std::optional<PrefillResult>>>(size_t(degree));
    job.results = results;
    start_job(id, std::move(job),
              [spec = std::make_shared<const DraftSpec>(std::move(spec)), results](DraftBatcher& b, int r) {
                (*results)[size_t(r)].emplace(b.prefill(*spec));
              });
  };
  // Request `id`'s deferred fold, a layer per slice.
  auto launch_fold = [=](uint64_t id) {
    PrefillSlices::Job job;
    job.kind = PrefillSlices::Job::Kind::fold;
    start_job(id, std::move(job), [id](DraftBatcher& b, int) { b.fold(id); });
  };
  // Request `id`'s exact prefill (compressed first), a chunk per slice.
  auto launch_finish = [=](uint64_t id, size_t cached) {
    PrefillSlices::Job job;
    job.kind = PrefillSlices::Job::Kind::finish;
    auto results = std::make_shared<std::vector<std::optional<PrefillResult>>>(size_t(degree));
    job.results = results;
    start_job(id, std::move(job), [id, cached, results](DraftBatcher& b, int r) {
      (*results)[size_t(r)].emplace(b.finish_prefill(id, cached));
    });
  };
  // A request with a fold or an exact prefill in flight: f waits for its end
  // (true), else runs now.
  auto after_job = [=](uint64_t id, std::function<void()> f) {
    auto it = slices->jobs.find(id);
    if (it == slices->jobs.end() || it->second.kind == PrefillSlices::Job::Kind::prefill) return false;
    it->second.deferred.push_back(std::move(f));
    return true;
  };
  auto on_draft = std::make_shared<std::function<void(const draft_msg&)>>();
  *on_draft = [=, self_fn = on_draft.get()](const draft_msg& m) {  // raw: no cycle
    if (after_job(m.id, [self_fn, m] { (*self_fn)(m); })) return;
    try {
      batcher->start(m.id, m.n, m.ahead);
      kick();
    } catch (const std::exception& e) {
      self->send(scheduler, failed_msg{m.id, e.what()});
    }
  };
  auto on_commit = std::make_shared<std::function<void(const commit_msg&)>>();
  *on_commit = [=, self_fn = on_commit.get()](const commit_msg& m) {
    const uint64_t id = m.outcome->id;
    if (after_job(id, [self_fn, m] { (*self_fn)(m); })) return;
    try {
      // With slicing, a view's rebuild that is due runs after it, a layer per slice.
      // Whole (no slicing): a fold runs inside the commit; it gets a trace slice of
      // its own (a commit without one gets none: bench throughput's busy fractions
      // count this track's slices).
      const size_t folds = batcher->rank(0).folds();
      const auto b = TraceRecorder::clock::now();
      batcher->commit(id, *m.outcome, m.ahead, /*defer_fold=*/slice_prefill);
      if (batcher->rank(0).folds() != folds) {
        const uint64_t ids[] = {id};
        trace->slice(track, "fold", ids, b, TraceRecorder::clock::now());
      }
      if (slice_prefill && batcher->fold_pending(id)) launch_fold(id);
    } catch (const std::exception& e) {
      self->send(scheduler, failed_msg{id, e.what()});
    }
  };
  // One slice of every rank's prefill, at once; true once they have all returned.
  auto resume_ranks = [=](PrefillSlices::Job& job, uint64_t id) {
    if (degree == 1) return job.tasks[0]->resume();
    std::vector<char> ended(size_t(degree), 0);
    batcher->run_ranks([&](int r) { ended[size_t(r)] = job.tasks[size_t(r)]->resume(); });
    const auto n = std::count(ended.begin(), ended.end(), char(1));
    if (n != 0 && n != degree)
      throw Error("tensor parallelism: the ranks' " + std::string(job.what()) + "s of request " +
                  std::to_string(id) + " ended at different slices");
    return n == degree;
  };
  // The ranks' results made one (checked equal across ranks).
  auto result_of = [=](PrefillSlices::Job& job, uint64_t id) {
    if (degree == 1) return std::move(*(*job.results)[0]);
    std::vector<PrefillResult> out;
    for (auto& r : *job.results) out.push_back(std::move(*r));
    if (job.kind == PrefillSlices::Job::Kind::finish) return batcher->merge_finished(id, std::move(out));
    return batcher->merge_prefills(id, std::move(out));
  };
  // A full-mode prompt waits while another is in flight or waiting (in order).
  auto start_sliced = [=](DraftSpec spec) {
    if (spec.mode == DecodeMode::full && (slices->full_in_flight() || !slices->waiting.empty()))
      return slices->waiting.push_back(std::move(spec));
    launch(std::move(spec));
  };
  // The full-mode prompt waiting first, once none is in flight.
  auto start_waiting = [=] {
    if (slices->waiting.empty() || slices->full_in_flight()) return;
    DraftSpec next = std::move(slices->waiting.front());
    slices->waiting.pop_front();
    launch(std::move(next));
  };
  // Runs a slice of request `id`'s prefill; at its end, answers the scheduler and
  // starts the full-mode prompt waiting, if any.
  *run_slice = [=](uint64_t id) {
    auto it = slices->jobs.find(id);
    if (it == slices->jobs.end()) return;  // released meanwhile
    bool ended = false;
    std::string error;
    {
      const auto kind = it->second.kind;
      auto s = trace->scope(track,
                            kind == PrefillSlices::Job::Kind::fold     ? "fold"
                            : kind == PrefillSlices::Job::Kind::finish ? "exact prefill"
                                                                       : "prefill",
                            id);
      const auto t0 = std::chrono::steady_clock::now();
      struct Clock {  // the slice's time, however it ends
        double& seconds;
        std::chrono::steady_clock::time_point t0;
        ~Clock() { seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); }
      } clock{it->second.seconds, t0};
      try {
        ended = resume_ranks(it->second, id);
      } catch (const std::exception& e) {
        ended = true;
        error = e.what();
      } catch (...) {
        ended = true;
        error = "drafter: " + std::string(it->second.what()) + " of request " + std::to_string(id) + " failed";
      }
    }
    if (!ended) {
      self->send(self, prefill_slice_msg{id});
      return;
    }
    PrefillSlices::Job job = std::move(it->second);
    slices->jobs.erase(it);
    using Kind = PrefillSlices::Job::Kind;
    if (job.kind != Kind::prefill) {  // a fold, or an exact prefill as finish_prefill_msg run whole
      if (error.empty() && job.kind == Kind::finish) {
        try {
          PrefillResult r = result_of(job, id);
          r.seconds = job.seconds;
          self->send(scheduler, prefill_finished_msg{std::move(r)});
        } catch (const std::exception& e) {
          error = e.what();
        }
      }
      job.tasks.clear();
      if (!error.empty()) {  // the scheduler releases the request
        if (error.find(job.what()) == std::string::npos)
          error = "drafter: " + std::string(job.what()) + " of request " + std::to_string(id) + ": " + error;
        self->send(scheduler, failed_msg{id, error});
        return kick();
      }
      for (const auto& f : job.deferred) f();
      return kick();
    }
    if (error.empty()) {
      try {
        PrefillResult r = result_of(job, id);
        r.seconds = job.seconds;  // not the other work run between its slices
        self->send(scheduler, prefilled_msg{std::move(r)});
      } catch (const std::exception& e) {
        error = e.what();
      }
    }
    job.tasks.clear();  // a rank whose task had not ended is cancelled (its cleanups run)
    if (!error.empty()) {
      self->send(scheduler, failed_msg{id, error});
      try {
        batcher->release(id);  // what a rank that ended before another failed holds
      } catch (const std::exception&) {
        // the request has failed already; its release's own error changes nothing
      }
    }
    if (job.full) start_waiting();
    kick();
  };
  return {
      [=](prefill_msg& m) {
        if (slice_prefill) return start_sliced(std::move(m.spec));
        try {
          // The slice ends before the scheduler hears of it (a lossy or vericache
          // request's first token went out earlier, through the first-token hook).
          std::optional<prefilled_msg> done;
          {
            auto s = trace->scope(track, "prefill", m.spec.id);
            done.emplace(prefilled_msg{batcher->prefill(m.spec)});
          }
          self->send(scheduler, std::move(*done));
        } catch (const std::exception& e) {
          self->send(scheduler, failed_msg{m.spec.id, e.what()});
        }
      },
      [=](prefill_slice_msg& m) { (*run_slice)(m.id); },
      [=](draft_msg& m) { (*on_draft)(m); },
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
        if (slice_prefill) return launch_finish(m.id, m.cached);
        try {
          std::optional<prefill_finished_msg> done;
          {
            auto s = trace->scope(track, "exact prefill", m.id);
            done.emplace(prefill_finished_msg{batcher->finish_prefill(m.id, m.cached)});
          }
          self->send(scheduler, std::move(*done));
        } catch (const std::exception& e) {
          self->send(scheduler, failed_msg{m.id, e.what()});
        }
      },
      [=](commit_msg& m) { (*on_commit)(m); },
      [=](release_msg& m) {
        if (slices->drop(m.id)) start_waiting();  // a prefill in flight stops: nothing of it is kept
        try {
          batcher->release(m.id);
        } catch (const std::exception&) {
          // Freeing never fails for a known request; an unknown one is a no-op.
        }
      },
      [=](release_tier_msg& m) {
        if (slices->drop(m.id)) start_waiting();  // before the entry it writes goes
        self->send(m.mover, release_msg{m.id});
      },
      [=](bind_msg& m) {  // every rank's compute threads (rank 0's first: this one)
        batcher->run_on_each_thread([&](int rank, int) { m.binder->bind_calling_thread("drafter", rank); });
        slices->binder = m.binder;
        return true;
      },
  };
}

caf::behavior mover(caf::event_based_actor* self, FullTier* tier,
                    std::shared_ptr<LayerStreamer> streamer, std::shared_ptr<TraceRecorder> trace) {
  auto group = std::make_shared<StreamerGroup>();
  group->ranks.push_back(std::move(streamer));
  return mover_group(self, {tier}, StreamerLanes{std::move(group)}, std::move(trace));
}

caf::behavior mover_group(caf::event_based_actor* self, std::vector<FullTier*> tiers,
                          StreamerLanes lanes, std::shared_ptr<TraceRecorder> trace) {
  const int track = trace->track("mover");
  // The ranks' commits run at once, each rank's rows to its own tier (its own link).
  const int degree = int(tiers.size());
  auto ranks = std::make_shared<RankGroup>(
      degree > 1 ? std::make_shared<CpuCommunicator>(degree) : nullptr);
  for (const auto& lane : lanes)
    for (size_t rank = 0; rank < lane->ranks.size(); ++rank) {
      const std::string prefix = rank == 0 ? "" : "rank " + std::to_string(rank) + " ";
      lane->ranks[rank]->set_layer_observer(
          [trace, track, prefix](uint64_t id, size_t layer, auto b, auto e, size_t bytes) {
            const std::array<uint64_t, 1> ids{id};
            trace->slice(track, prefix + "layer " + std::to_string(layer) + " transfer", ids, b,
                         e, {{"bytes", double(bytes)}});
          });
    }
  return {
      [=](stream_msg& m) -> caf::result<StreamerLanes> {
        if (m.jobs.empty() || m.jobs.size() > lanes.size())
          return caf::make_error(caf::sec::invalid_argument,
                                 "mover: " + std::to_string(m.jobs.size()) +
                                     " requests in one verify pass; it has " +
                                     std::to_string(lanes.size()) + " lanes");
        // Each rank's streamer reads its own tier on its own copy thread: the ranks'
        // links run at once; so do the lanes of a batched pass.
        StreamerLanes used(lanes.begin(), lanes.begin() + long(m.jobs.size()));
        for (size_t j = 0; j < m.jobs.size(); ++j)
          for (auto& s : used[j]->ranks)
            s->start(m.jobs[j].id, m.jobs[j].n_full, m.jobs[j].n_rows, m.jobs[j].whole_layers);
        return used;
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
        } catch (const std::exception& e) {
          // The request was cancelled (released) meanwhile (the scheduler ignores the
          // report), or its tier failed (a full disk): the request fails with the
          // tier's error, not the next verify pass's short read.
          if (m.failures_to)
            self->send(m.failures_to, failed_msg{v.id, std::string("committing the accepted tokens' KV: ") + e.what()});
        }
      },
      [=](release_msg& m) {
        for (FullTier* tier : tiers) tier->release_if_present(m.id);
      },
      [=](bind_msg& m) {  // the rank threads (commits) and each rank's copy thread
        ranks->run([&](int rank) { m.binder->bind_calling_thread("mover", rank); });
        for (const auto& lane : lanes)
          for (size_t rank = 0; rank < lane->ranks.size(); ++rank)
            m.binder->bind_thread(lane->ranks[rank]->copy_thread(), "mover", int(rank));
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
                             std::shared_ptr<TraceRecorder> trace, size_t max_batch) {
  const int track = trace->track("verifier");
  struct Waiting {
    VerifyJob job;
    bool alone = false;  // run in a pass of its own (a batched pass with it failed)
  };
  struct State {
    std::deque<Waiting> waiting;
    bool kicked = false;  // a verify_now_msg is in the mailbox
  };
  auto st = std::make_shared<State>();
  max_batch = std::max<size_t>(1, max_batch);
  auto kick = [=] {
    if (!st->kicked && !st->waiting.empty()) {
      st->kicked = true;
      self->send(self, verify_now_msg{});
    }
  };
  auto needs_alone = [](const Waiting& w) {
    return w.alone || w.job.collect_stats || w.job.hidden != nullptr;
  };
  return {
      [=](verify_msg& m) {
        st->waiting.push_back({std::move(m.job), false});
        kick();
      },
      [=](verify_now_msg&) {
        st->kicked = false;
        // The jobs that came while the last pass ran, in arrival order; one that
        // must run alone ends the batch (or is the batch).
        std::vector<VerifyJob> jobs;
        while (!st->waiting.empty() && jobs.size() < max_batch) {
          const bool alone = needs_alone(st->waiting.front());
          if (alone && !jobs.empty()) break;
          jobs.push_back(std::move(st->waiting.front().job));
          st->waiting.pop_front();
          if (alone) break;
        }
        if (jobs.empty()) return;
        stream_msg req;
        for (const VerifyJob& j : jobs)
          req.jobs.push_back({j.id, j.p0, j.drafts.size() + 1, false});
        // Blocking request: this actor owns the verify compute and has nothing else
        // to do until its pass can start.
        self->request(mover, caf::infinite, std::move(req))
            .await(
                [=](StreamerLanes& lanes) {
                  std::vector<std::shared_ptr<const VerifyOutcome>> outs;
                  try {
                    std::vector<uint64_t> ids;
                    for (const VerifyJob& j : jobs) ids.push_back(j.id);
                    const auto b = TraceRecorder::clock::now();
                    std::vector<const StreamerGroup*> groups;
                    for (const auto& l : lanes) groups.push_back(l.get());
                    outs = v->run_batch(jobs, groups);
                    size_t rows = 0;
                    for (const VerifyJob& j : jobs) rows += j.drafts.size() + 1;
                    trace->slice(track, "verify pass", ids, b, TraceRecorder::clock::now(),
                                 {{"rows", double(rows)}, {"requests", double(jobs.size())}});
                  } catch (const std::exception& e) {
                    if (jobs.size() == 1) {
                      self->send(scheduler, failed_msg{jobs[0].id, e.what()});
                    } else {  // find the request concerned: each again, alone, first
                      for (auto it = jobs.rbegin(); it != jobs.rend(); ++it)
                        st->waiting.push_front({*it, true});
                    }
                    kick();
                    return;
                  }
                  for (size_t j = 0; j < jobs.size(); ++j) {
                    self->send(mover, commit_msg{outs[j], jobs[j].p0, 0, scheduler});
                    self->send(scheduler, verified_msg{outs[j]});
                  }
                  kick();
                },
                [=](caf::error& err) {
                  for (const VerifyJob& j : jobs)
                    self->send(scheduler, failed_msg{j.id, "verify: mover: " + to_string(err)});
                  kick();
                });
        // No kick here: the next pass starts from the handlers above, behind the
        // jobs that arrive while this one runs, so they can share it.
      },
      [=](bind_msg& m) {
        v->run_on_each_thread([&](int rank, int) { m.binder->bind_calling_thread("verifier", rank); });
        return true;
      },
  };
}

}  // namespace vc::actors
