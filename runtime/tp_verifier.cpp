// Verify passes on every rank of a group (see tp_verifier.hpp).
#include "runtime/tp_verifier.hpp"

#include <array>
#include <string>

#include "kernels/error.hpp"

namespace vc {

TpVerifier::TpVerifier(std::vector<std::shared_ptr<Verifier>> ranks,
                       std::shared_ptr<Communicator> comm)
    : ranks_(std::move(ranks)), group_(std::move(comm)) {
  if (ranks_.empty() || size_t(group_.degree()) != ranks_.size())
    throw Error("TpVerifier: " + std::to_string(ranks_.size()) + " verifiers for a group of " +
                std::to_string(group_.degree()));
}

TpVerifier::TpVerifier(std::shared_ptr<Verifier> one)
    : TpVerifier(std::vector<std::shared_ptr<Verifier>>{std::move(one)}, nullptr) {}

void TpVerifier::run_on_each_thread(const std::function<void(int rank, int thread)>& f) {
  group_.run([&](int r) { ranks_[size_t(r)]->run_on_each_thread([&](int t) { f(r, t); }); });
}

const VerifyOutcome& rank_outcome(const VerifyOutcome& v, int r, int degree) {
  if (r == 0 || degree == 1) return v;
  const auto& group = static_cast<const TpVerifyOutcome&>(v);  // see the header
  if (r < 0 || size_t(r) > group.other_ranks.size())
    throw Error("rank_outcome: rank " + std::to_string(r) + " of an outcome of " +
                std::to_string(group.other_ranks.size() + 1) + " ranks");
  return group.other_ranks[size_t(r - 1)];
}

namespace {

// Rank 0's outcome with the other ranks' behind it (their tokens must agree).
std::shared_ptr<const VerifyOutcome> group_outcome(std::vector<VerifyOutcome> out, uint64_t id) {
  if (out.size() == 1) return std::make_shared<const VerifyOutcome>(std::move(out[0]));
  auto v = std::make_shared<TpVerifyOutcome>();
  static_cast<VerifyOutcome&>(*v) = std::move(out[0]);
  for (size_t r = 1; r < out.size(); ++r) {
    const VerifyOutcome& o = out[r];
    if (o.tokens != v->tokens || o.logprobs != v->logprobs || o.accepted != v->accepted)
      throw Error("tensor parallelism: rank " + std::to_string(r) +
                  " verified other tokens than rank 0 (request " + std::to_string(id) + ")");
    v->other_ranks.push_back(std::move(out[r]));
  }
  return v;
}

void check_streams(const StreamerGroup& streams, size_t d) {
  if (streams.ranks.size() != d)
    throw Error("verify: " + std::to_string(streams.ranks.size()) + " streamers for " +
                std::to_string(d) + " ranks");
}

}  // namespace

std::shared_ptr<const VerifyOutcome> TpVerifier::run(const VerifyJob& job,
                                                     const StreamerGroup& streams) {
  const std::array<const StreamerGroup*, 1> one{&streams};
  return run_batch(std::span(&job, 1), one)[0];
}

std::vector<std::shared_ptr<const VerifyOutcome>> TpVerifier::run_batch(
    std::span<const VerifyJob> jobs, std::span<const StreamerGroup* const> streams) {
  const size_t d = ranks_.size();
  if (jobs.size() != streams.size())
    throw Error("verify: " + std::to_string(streams.size()) + " streamer groups for " +
                std::to_string(jobs.size()) + " jobs");
  for (const StreamerGroup* s : streams) check_streams(*s, d);
  std::vector<std::vector<VerifyOutcome>> per_rank(d);  // [rank][job]
  group_.run([&](int r) {
    std::vector<LayerStreamer*> mine;
    for (const StreamerGroup* s : streams) mine.push_back(s->ranks[size_t(r)].get());
    per_rank[size_t(r)] = ranks_[size_t(r)]->run_batch(jobs, mine);
  });
  std::vector<std::shared_ptr<const VerifyOutcome>> out;
  for (size_t j = 0; j < jobs.size(); ++j) {
    std::vector<VerifyOutcome> ranks;
    for (size_t r = 0; r < d; ++r) ranks.push_back(std::move(per_rank[r][j]));
    out.push_back(group_outcome(std::move(ranks), jobs[j].id));
  }
  return out;
}

}  // namespace vc
