// Drafting on every rank of a group (see tp_draft_batcher.hpp).
#include "runtime/tp_draft_batcher.hpp"

#include <algorithm>
#include <exception>
#include <string>

#include "kernels/error.hpp"
#include "runtime/tp_verifier.hpp"

namespace vc {

namespace {

// Calls f on every rank in turn (no pass, no collective), then rethrows the first
// failure: every rank has seen the call, so their states stay equal.
template <class F>
void each_rank(std::vector<std::shared_ptr<DraftBatcher>>& ranks, F f) {
  std::exception_ptr first;
  for (auto& b : ranks) {
    try {
      f(*b);
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

[[noreturn]] void disagree(size_t r, const char* what, uint64_t id) {
  throw Error("tensor parallelism: rank " + std::to_string(r) + " " + what +
              " than rank 0 (request " + std::to_string(id) + ")");
}

}  // namespace

TpDraftBatcher::TpDraftBatcher(std::vector<std::shared_ptr<DraftBatcher>> ranks,
                               std::shared_ptr<Communicator> comm)
    : ranks_(std::move(ranks)), group_(std::move(comm)) {
  if (ranks_.empty() || size_t(group_.degree()) != ranks_.size())
    throw Error("TpDraftBatcher: " + std::to_string(ranks_.size()) + " batchers for a group of " +
                std::to_string(group_.degree()));
}

TpDraftBatcher::TpDraftBatcher(std::shared_ptr<DraftBatcher> one)
    : TpDraftBatcher(std::vector<std::shared_ptr<DraftBatcher>>{std::move(one)}, nullptr) {}

PrefillResult TpDraftBatcher::prefill(const DraftSpec& spec) {
  const size_t d = ranks_.size();
  if (d == 1) return ranks_[0]->prefill(spec);
  std::vector<PrefillResult> out(d);
  group_.run([&](int r) { out[size_t(r)] = ranks_[size_t(r)]->prefill(spec); });
  return merge_prefills(spec.id, std::move(out));
}

PrefillResult TpDraftBatcher::merge_prefills(uint64_t id, std::vector<PrefillResult> out) {
  const size_t d = ranks_.size();
  if (out.size() != d)
    throw Error("TpDraftBatcher: " + std::to_string(out.size()) + " prefill results for a group of " +
                std::to_string(d));
  PrefillResult p = std::move(out[0]);
  for (size_t r = 1; r < d; ++r) {
    const PrefillResult& o = out[r];
    if (o.token != p.token || o.logprob != p.logprob) {
      for (auto& b : ranks_) b->release(id);
      disagree(r, "chose another first token", id);
    }
    if (o.exact_pending != p.exact_pending) {
      for (auto& b : ranks_) b->release(id);
      disagree(r, "started from another head start", id);
    }
    p.compressed_bytes += o.compressed_bytes;
    p.compressed_full_bytes += o.compressed_full_bytes;
    p.fast_bytes_peak = std::max(p.fast_bytes_peak, o.fast_bytes_peak);
    p.views.insert(p.views.end(), o.views.begin(), o.views.end());  // rank order
    // Recompute front: the ranks agreed on the chunks (meet_back_fetch); the
    // bytes are every rank's, the reason the first rank's that has one.
    if (p.met.has_value() != o.met.has_value() ||
        (p.met && (o.met->front_chunks != p.met->front_chunks || o.met->fetched_chunks != p.met->fetched_chunks ||
                   o.met->publish_from != p.met->publish_from || o.met->publish_known != p.met->publish_known))) {
      for (auto& b : ranks_) b->release(id);
      disagree(r, "met its fetch at another chunk", id);
    }
    if (p.met) {
      p.met->run.bytes += o.met->run.bytes;
      p.met->run.seconds = std::max(p.met->run.seconds, o.met->run.seconds);
      if (p.met->run.stop_reason.empty()) p.met->run.stop_reason = o.met->run.stop_reason;
    }
  }
  return p;
}

PrefillResult TpDraftBatcher::finish_prefill(uint64_t id, size_t cached) {
  const size_t d = ranks_.size();
  if (d == 1) return ranks_[0]->finish_prefill(id, cached);
  // The exact prefill of the suffix meets in collectives: every rank at once.
  std::vector<PrefillResult> out(d);
  group_.run([&](int r) { out[size_t(r)] = ranks_[size_t(r)]->finish_prefill(id, cached); });
  return merge_finished(id, std::move(out));
}

PrefillResult TpDraftBatcher::merge_finished(uint64_t id, std::vector<PrefillResult> out) {
  const size_t d = ranks_.size();
  if (out.size() != d)
    throw Error("TpDraftBatcher: " + std::to_string(out.size()) + " finished prefills for a group of " +
                std::to_string(d));
  const size_t views0 = out[0].views.size();  // rank 0's own: p.views grows below
  PrefillResult p = std::move(out[0]);
  for (size_t r = 1; r < d; ++r) {
    const PrefillResult& o = out[r];
    if (o.token != p.token || o.logprob != p.logprob || o.drafts_kept != p.drafts_kept)
      disagree(r, "chose another exact first token", id);
    if (o.views.size() != views0) disagree(r, "decided otherwise whether to rebuild its view", id);
    p.compressed_bytes += o.compressed_bytes;
    p.compressed_full_bytes += o.compressed_full_bytes;
    p.fast_bytes_peak = std::max(p.fast_bytes_peak, o.fast_bytes_peak);
    p.views.insert(p.views.end(), o.views.begin(), o.views.end());  // rank order
  }
  return p;
}

void TpDraftBatcher::start(uint64_t id, size_t n, bool ahead) {
  each_rank(ranks_, [&](DraftBatcher& b) { b.start(id, n, ahead); });
}

std::vector<DraftBlock> TpDraftBatcher::step() {
  const size_t d = ranks_.size();
  if (d == 1) return ranks_[0]->step();
  std::vector<std::vector<DraftBlock>> out(d);
  group_.run([&](int r) { out[size_t(r)] = ranks_[size_t(r)]->step(); });
  std::vector<DraftBlock> done = std::move(out[0]);
  for (size_t r = 1; r < d; ++r) {
    if (out[r].size() != done.size()) disagree(r, "finished other blocks", done.empty() ? 0 : done[0].id);
    for (size_t i = 0; i < done.size(); ++i) {
      const DraftBlock& o = out[r][i];
      DraftBlock& b = done[i];
      if (o.id != b.id || o.tokens != b.tokens || o.logprobs != b.logprobs || o.final != b.final ||
          o.more != b.more)
        disagree(r, "drafted other tokens", b.id);
      b.fast_bytes_peak = std::max(b.fast_bytes_peak, o.fast_bytes_peak);
    }
  }
  return done;
}

void TpDraftBatcher::commit(uint64_t id, const VerifyOutcome& v, size_t ahead, bool defer_fold) {
  const int d = degree();
  // A commit may rebuild the view through the compressor: collectives, so at once.
  group_.run([&](int r) { ranks_[size_t(r)]->commit(id, rank_outcome(v, r, d), ahead, defer_fold); });
}

void TpDraftBatcher::set_chunk_hook(const std::function<void(int rank)>& hook) {
  for (size_t r = 0; r < ranks_.size(); ++r) ranks_[r]->set_chunk_hook([hook, r] { hook(int(r)); });
}

void TpDraftBatcher::align(int rank) {
  if (ranks_.size() == 1) return;
  float one = 1.0f;
  group_.comm()->all_reduce_sum(rank, &one, 1);
  if (one != float(ranks_.size())) throw Error("tensor parallelism: rank " + std::to_string(rank) +
                                              " met the others out of step before a prefill chunk or a view's layer");
}

void TpDraftBatcher::set_stream_final(bool on) {
  for (auto& b : ranks_) b->set_stream_final(on);
}

void TpDraftBatcher::release(uint64_t id) {
  each_rank(ranks_, [&](DraftBatcher& b) { b.release(id); });
}

size_t TpDraftBatcher::prefill_bytes_streamed() const {
  size_t n = 0;
  for (const auto& b : ranks_) n += b->prefill_bytes_streamed();
  return n;
}

void TpDraftBatcher::run_on_each_thread(const std::function<void(int rank, int thread)>& f) {
  group_.run([&](int r) { ranks_[size_t(r)]->run_on_each_thread([&](int t) { f(r, t); }); });
}

}  // namespace vc
