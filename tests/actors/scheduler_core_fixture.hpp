// Shared by the SchedulerCore tests: a fake Outbox that records what the scheduler
// asks the workers to do, and helpers that build requests and play the workers.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "actors/scheduler_core.hpp"

namespace vc::actors {
namespace {

using Phase = RequestCtx::Phase;

/// One Outbox call.
struct Call {
  enum Kind {
    prefill, draft, verify, commit, release, fetch, publish, release_tier, fetch_compressed,
    finish_prefill, meet
  } kind = prefill;
  uint64_t id = 0;
  size_t n = 0;  // draft: tokens; commit: p0; fetch(_compressed): max positions;
                 // publish: first chunk; finish_prefill: cached positions;
                 // meet: max positions
  VerifyJob job;          // verify
  std::shared_ptr<const VerifyOutcome> outcome;  // commit
  bool full_tier = false;  // release
  bool ahead = false;      // draft: further ahead (compressed first); release_tier: after the
                           // drafter; publish: skip the chunks the store holds
  size_t kept_ahead = 0;   // commit: drafts kept ahead past the round
  DraftSpec spec;          // prefill
  RankViews views;  // publish: the views' chunks too (one per rank); fetch_compressed: the base
  std::string view_spec;  // publish, fetch_compressed: the compressor spec
  // fetch: positions the entry holds, room to create it with (0: it exists);
  // publish: `from` is the views' first chunk; fetch_compressed: `create` is the
  // longest suffix worth fetching for
  size_t from = 0, create = 0;
  RankMeetings meetings;  // meet
};

class FakeOutbox final : public Outbox {
 public:
  void prefill(const DraftSpec& spec) override {
    Call c;
    c.kind = Call::prefill;
    c.id = spec.id;
    c.spec = spec;
    calls.push_back(c);
  }
  void draft(uint64_t id, size_t n, bool ahead) override {
    Call c;
    c.kind = Call::draft;
    c.id = id;
    c.n = n;
    c.ahead = ahead;
    calls.push_back(c);
  }
  void verify(const VerifyJob& job) override {
    Call c;
    c.kind = Call::verify;
    c.id = job.id;
    c.job = job;
    calls.push_back(c);
  }
  void commit_drafter(std::shared_ptr<const VerifyOutcome> v, size_t p0, size_t ahead) override {
    Call c;
    c.kind = Call::commit;
    c.id = v->id;
    c.n = p0;
    c.kept_ahead = ahead;
    c.outcome = std::move(v);
    calls.push_back(c);
  }
  void release(uint64_t id, bool full_tier) override {
    Call c;
    c.kind = Call::release;
    c.id = id;
    c.full_tier = full_tier;
    calls.push_back(c);
  }

  void remote_fetch(uint64_t id, const std::vector<int32_t>&, size_t from_positions,
                    size_t max_positions, size_t create_positions) override {
    Call c;
    c.kind = Call::fetch;
    c.id = id;
    c.n = max_positions;
    c.from = from_positions;
    c.create = create_positions;
    calls.push_back(c);
  }
  void remote_publish(uint64_t id, const std::vector<int32_t>&, size_t first_chunk,
                      RankViews views, const std::string& view_spec,
                      size_t first_view_chunk, bool skip_held) override {
    Call c;
    c.ahead = skip_held;
    c.kind = Call::publish;
    c.id = id;
    c.n = first_chunk;
    c.from = first_view_chunk;
    c.views = std::move(views);
    c.view_spec = view_spec;
    calls.push_back(c);
  }
  void remote_meet(uint64_t id, const std::vector<int32_t>&, size_t max_positions,
                   RankMeetings meetings) override {
    Call c;
    c.kind = Call::meet;
    c.id = id;
    c.n = max_positions;
    c.meetings = std::move(meetings);
    calls.push_back(c);
  }
  void release_tier(uint64_t id, bool after_drafter) override {
    Call c;
    c.kind = Call::release_tier;
    c.id = id;
    c.ahead = after_drafter;
    calls.push_back(c);
  }

  void remote_fetch_compressed(uint64_t id, const std::vector<int32_t>&, size_t from_positions,
                               size_t max_positions, const std::string& view_spec,
                               RankViews base, size_t max_suffix) override {
    Call c;
    c.create = max_suffix;
    c.views = std::move(base);
    c.kind = Call::fetch_compressed;
    c.id = id;
    c.n = max_positions;
    c.from = from_positions;
    c.view_spec = view_spec;
    calls.push_back(c);
  }
  void finish_prefill(uint64_t id, size_t cached) override {
    Call c;
    c.kind = Call::finish_prefill;
    c.id = id;
    c.n = cached;
    calls.push_back(c);
  }

  /// The calls since the last take(), which forgets them.
  std::vector<Call> take() { return std::exchange(calls, {}); }

  std::vector<Call> calls;
};

struct Submitted {
  std::shared_ptr<RequestCtx> ctx;
  std::future<vericache::Result> result;
};

Submitted make_request(uint64_t id, size_t prompt_size, size_t max_tokens, size_t L = 4,
                       DecodeMode mode = DecodeMode::vericache) {
  Submitted s;
  s.ctx = std::make_shared<RequestCtx>();
  s.ctx->id = id;
  s.ctx->spec.id = id;
  s.ctx->spec.mode = mode;
  for (size_t i = 0; i < prompt_size; ++i) s.ctx->spec.prompt.push_back(int32_t(1000 + i));
  s.ctx->spec.max_new_tokens = max_tokens;
  s.ctx->stop.max_tokens = max_tokens;
  s.ctx->policy = DraftLengthPolicy::fixed(L);
  s.ctx->result.id = id;
  s.result = s.ctx->promise.get_future();
  return s;
}

bool ready(const std::future<vericache::Result>& f) {
  return f.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
}

PrefillResult prefilled(uint64_t id, int32_t token) {
  PrefillResult r;
  r.id = id;
  r.token = token;
  r.logprob = -0.5f;
  return r;
}

[[maybe_unused]] DraftBlock drafts(uint64_t id, std::vector<int32_t> tokens) {
  DraftBlock b;
  b.id = id;
  b.tokens = std::move(tokens);
  b.seconds = 0.001;
  return b;
}

[[maybe_unused]] DraftBlock final_block(uint64_t id, std::vector<int32_t> tokens) {
  DraftBlock b;
  b.id = id;
  b.logprobs.assign(tokens.size(), -1.0f);
  b.tokens = std::move(tokens);
  b.final = true;
  return b;
}

[[maybe_unused]] std::shared_ptr<const VerifyOutcome> verified(uint64_t id, std::vector<int32_t> tokens,
                                              size_t accepted) {
  auto v = std::make_shared<VerifyOutcome>();
  v->id = id;
  v->logprobs.assign(tokens.size(), -0.25f);
  v->tokens = std::move(tokens);
  v->accepted = accepted;
  v->seconds = 0.002;
  return v;
}

std::vector<Call::Kind> kinds(const std::vector<Call>& calls) {
  std::vector<Call::Kind> k;
  for (const auto& c : calls) k.push_back(c.kind);
  return k;
}

[[maybe_unused]] std::vector<uint64_t> ids_of(const std::vector<Call>& calls, Call::Kind kind) {
  std::vector<uint64_t> ids;
  for (const auto& c : calls)
    if (c.kind == kind) ids.push_back(c.id);
  return ids;
}

// ---------------------------------------------------------------------------------

}  // namespace
}  // namespace vc::actors
