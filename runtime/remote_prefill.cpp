// Prefill of a lossy or vericache request with the remote prefix cache (pipeline 2
// of DESIGN.md). Two flows:
//
//   compressed first (the store has the prefix's compressed chunks for this
//   compressor, parameters and ratio):
//     1. fetch the compressed chunks [0, C) and join them: the drafter's view;
//     2. vericache: a fetch thread streams the full chunks into the full tier;
//     3. while the full chunks are still on their way, the drafter prefills the
//        suffix [C, n) over the view into its tail and drafts the first round (its
//        guess of the first token, then L drafts); it stops when they arrive;
//     4. the first verification waits for the full chunks (all of them: the
//        suffix's exact prefill reads every prefix position), then the suffix
//        [F, n) is prefilled exactly into the full tier, F being where the full
//        chunks ended (a fault there means local recompute of [F, C) too); the
//        verifier's first token comes from those exact logits, and the early
//        drafts are verified when the drafter's guess was that token. The tail's
//        suffix then takes the exact KV, as after a local prefill.
//     lossy: steps 1 and 3 only; decoding runs over the fetched view and a suffix
//     computed over it, so its output can differ from a local lossy run.
//   full (otherwise): fetch the full chunks, prefill the rest, build the view
//     locally; publish the full chunks the store lacked and the view's compressed
//     chunks.
//
// No token is emitted before the exact logits of the last prompt position exist,
// and every verified token reads only checked full chunks or local prefill.
#include <algorithm>
#include <chrono>
#include <future>
#include <optional>
#include <tuple>

#include "kvtiers/full_tier.hpp"
#include "kvtiers/remote/back_fetch_board.hpp"
#include "kvtiers/remote/back_fetch_meeting.hpp"
#include "kvtiers/remote/remote_tier.hpp"
#include "runtime/compression.hpp"
#include "runtime/fast_memory_need.hpp"
#include "runtime/generator_request.hpp"
#include "runtime/model.hpp"
#include "runtime/tp_comm.hpp"
#include "runtime/layer_streamer.hpp"
#include "runtime/remote_prefix.hpp"
#include "runtime/streamed_prefill.hpp"

namespace vc {

namespace {

void note_full_fetch(GenerateStats& s, const RemoteFetch& f) {
  s.remote_chunks_hit = f.chunks;
  s.remote_positions = f.positions;
  s.remote_bytes_full = f.bytes_full;
  s.remote_fetch_seconds = f.seconds;
  s.remote_stop_reason = f.stop_reason;
}

// The group of a shard of degree > 1, else null (no rank to agree with).
const TensorParallelRank* group_of(const Model& m) {
  return m.tp() != nullptr && m.tp()->degree > 1 ? m.tp() : nullptr;
}

// The fewest and the most positions any rank of `tp`'s group fetched.
std::pair<size_t, size_t> prefix_range(const TensorParallelRank& tp, size_t positions) {
  std::vector<float> all(size_t(tp.degree));
  const float mine = float(positions);  // exact: prompts stay far below 2^24 positions
  tp.comm->all_gather(tp.rank, &mine, 1, all.data());
  const auto [lo, hi] = std::minmax_element(all.begin(), all.end());
  return {size_t(*lo), size_t(*hi)};
}

}  // namespace

size_t Generator::fetch_remote_prefix(Request& rq, std::span<const int32_t> prompt) {
  const size_t limit = remote_prefix_limit(*rq.compressor, prompt.size(), rq.opt.stats_window);
  RemoteFetch f = remote_->fetch_prefix(prompt, limit, *full_tier_, rq.tier_id);
  // Tensor parallelism: each rank fetched its own shard's chunks, and a chunk may be
  // missing for one rank alone (evicted, corrupt). The ranks prefill from the same
  // position (their passes meet in collectives): the shortest prefix any rank has.
  // A rank that fetched more refetches up to it into a fresh entry; after two
  // disagreements every rank takes nothing.
  if (const TensorParallelRank* tp = group_of(*model_)) {
    for (int attempt = 0;; ++attempt) {
      const auto [lo, hi] = prefix_range(*tp, f.positions);
      if (lo == hi) break;
      if (f.positions == lo) continue;  // the others come down to it
      const size_t keep = attempt < 2 ? lo : 0;
      const double seconds = f.seconds;
      full_tier_->release(rq.tier_id);
      full_tier_->create(rq.tier_id, prompt.size() + size_t(std::max(rq.steps, 0)));
      f = keep > 0 ? remote_->fetch_prefix(prompt, keep, *full_tier_, rq.tier_id) : RemoteFetch{};
      f.seconds += seconds;
      if (f.positions == keep)
        f.stop_reason = "the tensor-parallel ranks' cached prefixes differ (" + std::to_string(lo) +
                        " to " + std::to_string(hi) + " positions): every rank takes " +
                        std::to_string(keep);
    }
  }
  note_full_fetch(rq.result.stats, f);
  return f.positions;
}

void Generator::share_back_fetches(std::shared_ptr<BackFetchBoard> board, size_t rank) {
  back_board_ = std::move(board);
  back_rank_ = rank;
}

std::pair<size_t, size_t> Generator::fetch_remote_prefix_meeting(Request& rq, std::span<const int32_t> prompt) {
  const auto t0 = std::chrono::steady_clock::now();
  const size_t limit = remote_prefix_limit(*rq.compressor, prompt.size(), rq.opt.stats_window);
  const size_t T = remote_->layout().chunk_tokens;
  BackFetchMeeting meeting(limit / T, T);
  // A tensor-parallel rank posts its run's end for the others (and takes theirs).
  const size_t fetch_no = back_fetches_++;
  if (back_board_) back_board_->join(fetch_no, back_rank_, prompt, meeting);
  struct Leave {
    BackFetchBoard* board;
    size_t rank;
    ~Leave() {
      if (board != nullptr) board->leave(rank);
    }
  } leave{back_board_.get(), back_rank_};
  std::future<void> back = std::async(std::launch::async, [&] {
    fetch_back_into(*remote_, prompt, limit, meeting);
    if (back_board_) back_board_->ended(fetch_no, back_rank_, meeting);
  });
  // A group's fronts prefill together: each rank meets its own fetch (its KV heads'
  // chunks), and they agree chunk by chunk (meet_back_fetch's MeetingRanks).
  const TensorParallelRank* tp = group_of(*model_);
  std::optional<MeetingRanks> ranks;
  if (tp != nullptr) ranks = meeting_ranks(*tp);
  MetPrefix met;
  try {
    met = meet_back_fetch(
        meeting,
        [&](size_t f) {
          (void)prefill_to_tier(*model_, prompt.subspan(f * T, T), rq.tier_id, *full_tier_, *streamer_,
                                cache_, ws_, rq.opt.prefill_chunk);
        },
        *full_tier_, rq.tier_id, /*wait_for_run=*/true, ranks ? &*ranks : nullptr);
  } catch (...) {
    back.get();  // the fetcher stops once its batch in flight is in
    throw;
  }
  back.get();
  GenerateStats& s = rq.result.stats;
  s.remote_front_recomputed = met.front_chunks * T;
  s.remote_chunks_hit = met.fetched_chunks;
  s.remote_positions = met.fetched_chunks * T;
  s.remote_bytes_full = met.run.bytes;
  s.remote_fetch_seconds = seconds_since(t0);
  s.remote_stop_reason = met.run.stop_reason;
  return {met.cached_chunks() * T, met.publish_from};
}

PrefilledRequest Generator::prefill_with_remote(Request& rq, std::span<const int32_t> prompt,
                                                const PromptLogitsHook& on_logits) {
  const GenerateOptions& opt = rq.opt;
  GenerateStats& s = rq.result.stats;
  s.remote = true;
  const std::string spec = compressor_spec(opt.compressor, opt.compressor_params, opt.ratio);
  // KVzap scores every prompt row from its hidden state (a fetched view would leave
  // the request's score log without them): its prompt is computed locally.
  // Tensor parallelism: each rank fetches its own view (its KV heads' chunks); the
  // ranks draft in step, so they use their views only when every rank got the same
  // prefix, and every decision that depends on timing is taken jointly.
  const TensorParallelRank* tp = group_of(*model_);
  if (cfg_.remote_compressed_first && rq.compressed_first_fits && !rq.compressor->stats_needs().hidden) {
    RemoteCompressedFetch cf = remote_->fetch_compressed(prompt, prompt.size() - 1, spec);
    s.remote_compressed_chunks_hit = cf.chunks;
    s.remote_compressed_positions = cf.positions;
    s.remote_bytes_compressed = cf.bytes;
    s.remote_compressed_fetch_seconds = cf.seconds;
    s.remote_compressed_stop_reason = cf.stop_reason;
    if (tp != nullptr) {
      const auto [lo, hi] = prefix_range(*tp, cf.positions);
      if (lo != hi) {
        cf.view.reset();
        s.remote_compressed_stop_reason = "the tensor-parallel ranks' compressed prefixes differ (" +
                                          std::to_string(lo) + " to " + std::to_string(hi) +
                                          " positions): none is used";
      }
    }
    if (cf.view && tail_blocks_bytes(cache_.config(), prompt.size() - cf.view->covered()) > rq.suffix_room) {
      s.remote_compressed_stop_reason =
          "the suffix of " + std::to_string(prompt.size() - cf.view->covered()) +
          " positions past the fetched view does not fit the fast-memory budget: full flow";
      cf.view.reset();
    }
    if (cf.view) return prefill_compressed_first(rq, prompt, std::move(*cf.view), on_logits);
  }
  // The positions in the tier, and the first chunk the store lacks (to publish).
  size_t cached = 0, publish_from = 0;
  if (cfg_.remote_recompute_front) {
    std::tie(cached, publish_from) = fetch_remote_prefix_meeting(rq, prompt);
  } else {
    cached = fetch_remote_prefix(rq, prompt);
    publish_from = cached / remote_->layout().chunk_tokens;
  }
  PrefilledRequest p = prefill_compressed(*model_, prompt, rq.seq, cache_, ws_, *rq.compressor,
                                          opt.ratio, opt.stats_window, opt.prefill_chunk,
                                          *full_tier_, *streamer_, rq.tier_id, cached, on_logits);
  // Write-behind: copies the chunks, never waits for the store.
  s.remote_chunks_published = remote_->publish(prompt, publish_from, *full_tier_, rq.tier_id);
  // Compressed chunks serve compressed-first fetches (each rank's its own), not KVzap's.
  if (p.view && !rq.compressor->stats_needs().hidden)
    s.remote_compressed_chunks_published = remote_->publish_compressed(prompt, 0, *p.view, spec);
  return p;
}

PrefilledRequest Generator::prefill_compressed_first(Request& rq, std::span<const int32_t> prompt,
                                                     CompressedView view,
                                                     const PromptLogitsHook& on_logits) {
  const auto t0 = std::chrono::steady_clock::now();
  const GenerateOptions& opt = rq.opt;
  GenerateStats& s = rq.result.stats;
  s.remote_compressed_first = true;
  const size_t n = prompt.size(), covered = view.covered();
  rq.fold_from = n;  // the suffix in the tail does not count toward a fold

  // 2. The full chunks stream into the tier while the drafter works (the tier
  // entry is this request's alone; the drafter touches only fast memory). With
  // complete chunks past the fetched view, the exact prefill rebuilds the view
  // (step 4) and computes the statistics window (remote_prefix_limit).
  const size_t T = remote_->layout().chunk_tokens;
  const bool rebuild = n / T * T > covered;
  const size_t full_limit = rebuild ? remote_prefix_limit(*rq.compressor, n, opt.stats_window) : n - 1;
  std::future<RemoteFetch> full;
  if (opt.mode == DecodeMode::vericache)
    full = std::async(std::launch::async, [this, prompt, full_limit, id = rq.tier_id] {
      return remote_->fetch_prefix(prompt, full_limit, *full_tier_, id);
    });

  // 3. The suffix over the view, into the drafter's tail, and the first round's
  // drafts (the guess of the first token, then L after it): drafting work only
  // while the full chunks are still on their way.
  // At tp > 1 "arrived" means every rank's chunks are in, decided jointly (an
  // all-reduce at each check) so that every rank drafts the same steps.
  const TensorParallelRank* tp = group_of(*model_);
  const auto arrived = [&full, tp] {
    const bool mine = full.valid() && full.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
    if (tp == nullptr) return mine;
    float in = mine ? 1.0f : 0.0f;
    tp->comm->all_reduce_sum(tp->rank, &in, 1);
    return in == float(tp->degree);
  };
  rq.view = std::move(view);
  cache_.start_at(rq.seq, covered);
  std::vector<ForwardRow> rows;
  std::vector<float> draft_logits;
  const size_t step = opt.prefill_chunk > 0 ? opt.prefill_chunk : n;
  bool suffix_drafted = true;
  for (size_t b = covered; b < n && suffix_drafted; b += step) {
    if (arrived()) {
      suffix_drafted = false;
      break;
    }
    const size_t e = std::min(n, b + step);
    cache_.reserve(rq.seq, e);
    rows.clear();
    for (size_t i = b; i < e; ++i)
      rows.push_back(ForwardRow{prompt[i], int32_t(i), &rq.seq, i + 1 == n, &*rq.view});
    const PromptRows prompt_rows(ws_);
    forward(*model_, rows, cache_, ws_, draft_logits);
    s.remote_suffix_drafted += e - b;
  }
  rq.note_fast(cache_);
  PrefilledRequest p;
  if (opt.mode == DecodeMode::lossy) {  // decodes over the fetched view as it is
    p.logits = std::move(draft_logits);
    p.prefill_seconds = seconds_since(t0);
    return p;
  }
  // The guess of the first token, then drafts after it for as long as the full
  // chunks take: at least one round's, at most GeneratorConfig::remote_predraft and
  // what the tail's fast-memory bound holds (--fold-every positions and a round).
  const size_t round = (opt.draft_auto ? opt.max_draft : opt.draft_length) + 1;
  const size_t ahead = opt.fold_every > 0 ? std::min(cfg_.remote_predraft, opt.fold_every + round)
                                          : cfg_.remote_predraft;
  const size_t want = std::min(size_t(std::max(rq.steps, 0)), std::max(round, ahead));
  std::vector<float> lg;
  if (suffix_drafted && want > 0) {
    int32_t tok = sample_token(draft_logits, opt.sampling, int64_t(n));
    rq.predraft.push_back(tok);
    while (rq.predraft.size() < want && !arrived()) {
      const size_t at = n + rq.predraft.size() - 1;  // tok's position
      cache_.reserve(rq.seq, at + 1);
      rows.assign(1, ForwardRow{tok, int32_t(at), &rq.seq, true, &*rq.view});
      forward(*model_, rows, cache_, ws_, lg);
      tok = sample_token(lg, opt.sampling, int64_t(at) + 1);
      rq.predraft.push_back(tok);
    }
  }
  s.remote_predrafted = rq.predraft.empty() ? 0 : rq.predraft.size() - 1;
  rq.note_fast(cache_);

  // 4. Wait for the full chunks, then the exact suffix from where they ended.
  const auto tw = std::chrono::steady_clock::now();
  RemoteFetch f = full.get();
  s.remote_full_wait_seconds = seconds_since(tw);
  if (tp != nullptr) {  // the ranks prefill from one position: the shortest prefix
    const auto [lo, hi] = prefix_range(*tp, f.positions);
    if (lo != hi) {
      full_tier_->truncate(rq.tier_id, lo);
      f.positions = lo;
      f.chunks = lo / remote_->layout().chunk_tokens;
      f.stop_reason = "the tensor-parallel ranks' cached prefixes differ (" + std::to_string(lo) +
                      " to " + std::to_string(hi) + " positions): every rank takes " + std::to_string(lo);
    }
  }
  note_full_fetch(s, f);
  if (rebuild) {
    // Complete chunks past the fetched view: the view is rebuilt over the whole
    // prompt as a local prefill builds it (replacing the fetched one; the tail lets
    // the suffix go), and its chunks the store lacked are published.
    PrefilledRequest e = prefill_and_compress(*model_, prompt, cache_, ws_, *rq.compressor, opt.ratio,
                                              opt.stats_window, opt.prefill_chunk, *full_tier_,
                                              *streamer_, rq.tier_id, f.positions, on_logits);
    p.logits = std::move(e.logits);
    p.view = std::move(e.view);
    p.compress_seconds = e.compress_seconds;
    cache_.release_prefix(rq.seq, n);
    s.remote_compressed_chunks_published = remote_->publish_compressed(
        prompt, covered / T, *p.view, compressor_spec(opt.compressor, opt.compressor_params, opt.ratio));
  } else {
    p.logits = prefill_to_tier(*model_, prompt.subspan(f.positions), rq.tier_id, *full_tier_,
                               *streamer_, cache_, ws_, opt.prefill_chunk);
    if (on_logits) on_logits(p.logits);
    // The drafter's tail takes the suffix's exact KV (what a local prefill leaves it).
    cache_.reserve(rq.seq, n);
    copy_tier_rows(*full_tier_, rq.tier_id, covered, n, cache_, rq.seq);
  }
  p.prefill_seconds = seconds_since(t0);
  s.remote_chunks_published =
      remote_->publish(prompt, f.positions / remote_->layout().chunk_tokens, *full_tier_, rq.tier_id);
  return p;
}

}  // namespace vc
