// Continuous batching of draft (and full/lossy decode) steps across requests.
#include "runtime/draft_batcher.hpp"

#include <algorithm>
#include <chrono>

#include "kernels/error.hpp"

namespace vc {

DraftBatcher::DraftBatcher(std::shared_ptr<const Model> model, FullTier* tier,
                           size_t capacity_tokens, DType kv_dtype, int threads)
    : model_(std::move(model)), tier_(tier), ws_(threads),
      cache_(model_->kv_config(capacity_tokens, kv_dtype)) {}

DraftBatcher::Req& DraftBatcher::get(uint64_t id, const char* op) {
  auto it = reqs_.find(id);
  if (it == reqs_.end()) throw Error(std::string("drafter: ") + op + ": unknown request " + std::to_string(id));
  return it->second;
}

const DraftBatcher::Req& DraftBatcher::get(uint64_t id, const char* op) const {
  auto it = reqs_.find(id);
  if (it == reqs_.end()) throw Error(std::string("drafter: ") + op + ": unknown request " + std::to_string(id));
  return it->second;
}

PrefillResult DraftBatcher::prefill(const DraftSpec& spec) {
  const auto t0 = std::chrono::steady_clock::now();
  if (reqs_.count(spec.id)) throw Error("drafter: request " + std::to_string(spec.id) + " exists");
  if (spec.prompt.empty()) throw Error("drafter: request " + std::to_string(spec.id) + " has an empty prompt");
  std::unique_ptr<Compressor> compressor;
  if (spec.mode != DecodeMode::full) compressor = make_compressor(spec.compressor, spec.compressor_params);
  const Compressor* planner = compressor.get();
  if (spec.mode == DecodeMode::vericache && tier_ == nullptr)
    throw Error("drafter: vericache needs a full tier");
  Req r;
  r.spec = spec;
  bool tier_created = false;  // the cleanup below must not drop an entry it did not make
  try {
    PrefilledRequest p = prefill_request(*model_, spec.prompt, r.seq, cache_, ws_, planner,
                                         spec.ratio, spec.stats_window, spec.prefill_chunk);
    r.view = std::move(p.view);
    r.compressor = std::move(compressor);
    if (spec.mode == DecodeMode::vericache) {
      tier_->create(spec.id, spec.prompt.size() + spec.max_new_tokens);
      tier_created = true;
      tier_->copy_from(spec.id, cache_, r.seq, 0, spec.prompt.size());
    }
    r.pos = spec.prompt.size();
    r.cur = sample_token(p.logits, spec.sampling, int64_t(r.pos));
    PrefillResult out;
    out.id = spec.id;
    out.token = r.cur;
    out.logprob = token_logprob(p.logits, r.cur);
    if (r.view) {
      out.compressed_bytes = r.view->stored_bytes();
      out.compressed_full_bytes = r.view->full_bytes();
    }
    out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    reqs_.emplace(spec.id, std::move(r));
    return out;
  } catch (...) {
    cache_.free(r.seq);
    if (tier_created) tier_->release(spec.id);
    throw;
  }
}

void DraftBatcher::start(uint64_t id, size_t n) {
  Req& r = get(id, "start");
  r.p0 = r.pos;
  r.start_token = r.cur;
  r.want = n;
  r.block = DraftBlock{};
  r.block.id = id;
  r.block.final = r.spec.mode != DecodeMode::vericache;
  r.block.wants_stats = !r.block.final && fold_due(r) && r.compressor->needs_stats();
  cache_.reserve(r.seq, r.pos + n + 1);
  if (std::find(active_.begin(), active_.end(), id) == active_.end()) active_.push_back(id);
}

std::vector<DraftBlock> DraftBatcher::step() {
  std::vector<DraftBlock> done;
  std::vector<ForwardRow> rows;
  std::vector<uint64_t> stepping;
  for (uint64_t id : active_) {
    Req& r = reqs_.at(id);
    if (r.want == 0) continue;
    rows.push_back(ForwardRow{r.cur, int32_t(r.pos), &r.seq, true, r.view ? &*r.view : nullptr});
    stepping.push_back(id);
  }
  last_ids_ = stepping;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<float> logits;
  if (!rows.empty()) forward(*model_, rows, cache_, ws_, logits);
  const double share = rows.empty() ? 0.0
                                    : std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
                                          double(rows.size());
  const size_t V = size_t(model_->config().vocab_size);
  for (size_t i = 0; i < stepping.size(); ++i) {
    Req& r = reqs_.at(stepping[i]);
    const std::span<const float> lg(&logits[i * V], V);
    const int32_t t = sample_token(lg, r.spec.sampling, int64_t(r.pos + 1));
    r.block.tokens.push_back(t);
    if (r.block.final) r.block.logprobs.push_back(token_logprob(lg, t));
    r.block.seconds += share;
    r.cur = t;
    r.pos += 1;
    r.want -= 1;
  }
  for (auto it = active_.begin(); it != active_.end();) {
    Req& r = reqs_.at(*it);
    if (r.want == 0) {
      done.push_back(std::move(r.block));
      it = active_.erase(it);
    } else {
      ++it;
    }
  }
  return done;
}

void DraftBatcher::commit(uint64_t id, const VerifyOutcome& v) {
  Req& r = get(id, "commit");
  const size_t layers = size_t(model_->config().num_layers);
  for (size_t row = 0; row <= v.accepted; ++row)
    for (size_t l = 0; l < layers; ++l) cache_.write(l, r.seq, r.p0 + row, v.k(l, row), v.v(l, row));
  cache_.truncate(r.seq, r.p0 + v.accepted + 1);
  if (fold_due(r) && tier_ != nullptr) {
    if (auto nv = refold(*r.compressor, *tier_, id, r.p0, v.stats.get(), *model_, r.spec.ratio)) {
      r.view = std::move(*nv);
      cache_.release_prefix(r.seq, r.p0);
      ++folds_;
    }
  }
  r.pos = r.p0 + v.accepted + 1;
  r.cur = v.tokens.back();
}

bool DraftBatcher::fold_due(const Req& r) const {
  return r.spec.mode == DecodeMode::vericache && r.view && r.spec.fold_every > 0 &&
         r.p0 >= r.view->covered() + r.spec.fold_every;
}

void DraftBatcher::release(uint64_t id) {
  auto it = reqs_.find(id);
  if (it == reqs_.end()) return;
  cache_.free(it->second.seq);
  // The full-tier entry was created here at prefill: free it too, so a request
  // cancelled while its prefill was in flight (the mover's release then came
  // first and found nothing) leaves nothing behind.
  if (it->second.spec.mode == DecodeMode::vericache && tier_ != nullptr)
    tier_->release_if_present(id);  // the mover may release it at the same time
  reqs_.erase(it);
  active_.erase(std::remove(active_.begin(), active_.end(), id), active_.end());
}

std::pair<int32_t, size_t> DraftBatcher::pending(uint64_t id) const {
  const Req& r = get(id, "pending");
  return {r.start_token, r.p0};
}

size_t DraftBatcher::fast_bytes(uint64_t id) const {
  const Req& r = get(id, "fast_bytes");
  if (!r.view) return cache_.bytes_of(r.seq);
  const size_t tail = r.seq.length > r.view->covered() ? r.seq.length - r.view->covered() : 0;
  return r.view->stored_bytes() + tail * cache_.bytes_per_token();
}

}  // namespace vc
