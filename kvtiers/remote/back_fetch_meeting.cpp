// The meeting of a front prefill and a back fetch (see the header).
#include "kvtiers/remote/back_fetch_meeting.hpp"

#include <algorithm>

#include "kvtiers/full_tier.hpp"

namespace vc {

bool BackFetchMeeting::begin(const ChunkLayout& layout) {
  std::lock_guard<std::mutex> lock(mu_);
  layout_ = layout;
  return !stopped_;
}

void BackFetchMeeting::end_run(std::string why) {
  ended_ = true;
  refusal_ = std::move(why);
}

bool BackFetchMeeting::take(size_t c, std::string&& value, size_t payload_offset) {
  std::unique_lock<std::mutex> lock(mu_);
  const size_t bytes = value.size();
  // Unbound with the hold full: wait for the bind (or the front's stop).
  if (tier_ == nullptr && held_bytes_ + bytes > hold_limit_ &&
      !cv_.wait_for(lock, bind_wait_, [&] { return tier_ != nullptr || stopped_ || ended_; })) {
    end_run("holding chunk " + std::to_string(c) + " would pass the " + format_bytes(hold_limit_) +
            " a back fetch may hold, and the prefill had not taken the chunks within " +
            std::to_string(bind_wait_.count()) + " ms");
    return false;
  }
  if (stopped_ || ended_ || c < claimed_) return false;
  if (c < floor_) {
    refusal_ = floor_why_;
    return false;
  }
  if (tier_ != nullptr) {
    try {
      write_chunk_ahead(layout_, c, value, payload_offset, *tier_, id_);
    } catch (const std::exception& e) {  // the chunks before it stay in the entry
      end_run("writing chunk " + std::to_string(c) + " into the entry: " + e.what());
      return false;
    }
  } else {
    held_bytes_ += bytes;
    run_taken_.values.emplace_back(std::move(value), payload_offset);
  }
  if (run_taken_.end == 0) run_taken_.end = c + 1;
  run_taken_.first = c;
  run_taken_.bytes += bytes;
  lowest_.store(c);
  return true;
}

void BackFetchMeeting::deliver(RemoteBackFetch run) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (run_) return;
    run.values.clear();
    if (!refusal_.empty()) run.stop_reason = refusal_;
    run_ = std::move(run);
  }
  cv_.notify_all();
}

std::string BackFetchMeeting::refusal() const {
  std::lock_guard<std::mutex> lock(mu_);
  return refusal_;
}

void BackFetchMeeting::bind(FullTier& tier, uint64_t id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    tier_ = &tier;
    id_ = id;
    // From the last chunk down, as they came: the run grows downward.
    std::vector<std::pair<std::string, size_t>> held = std::move(run_taken_.values);
    run_taken_.values.clear();
    held_bytes_ = 0;
    try {
      for (size_t i = 0; i < held.size(); ++i) {
        write_chunk_ahead(layout_, run_taken_.end - 1 - i, held[i].first, held[i].second, tier, id);
        std::string().swap(held[i].first);
      }
    } catch (const std::exception& e) {  // none of the run is kept: the front computes it
      end_run(std::string("writing the chunks held into the entry: ") + e.what());
      const size_t bytes = run_taken_.bytes;
      run_taken_ = RemoteBackFetch{};
      run_taken_.bytes = bytes;
      lowest_.store(chunks_);
      try {
        tier.drop_ahead(id);
      } catch (...) {  // the entry is gone: nothing of the run is left in it
      }
    }
  }
  cv_.notify_all();
}

void BackFetchMeeting::keep_above(size_t c, const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (c <= floor_) return;
  floor_ = c;
  floor_why_ = why;
}

bool BackFetchMeeting::claim(size_t f) {
  std::lock_guard<std::mutex> lock(mu_);
  if (f >= chunks_ || lowest_.load() <= f) return false;
  claimed_ = std::max(claimed_, f + 1);
  return true;
}

RemoteBackFetch BackFetchMeeting::stop() {
  std::unique_lock<std::mutex> lock(mu_);
  stopped_ = true;
  claimed_ = chunks_;
  RemoteBackFetch out = std::move(run_taken_);
  run_taken_ = RemoteBackFetch{};
  held_bytes_ = 0;
  std::reverse(out.values.begin(), out.values.end());
  if (out.end == 0) out.first = 0;
  lock.unlock();
  cv_.notify_all();  // a fetch waiting for the bind gives up
  return out;
}

const RemoteBackFetch& BackFetchMeeting::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return run_.has_value(); });
  return *run_;
}

const RemoteBackFetch* BackFetchMeeting::delivered() const {
  std::lock_guard<std::mutex> lock(mu_);
  return run_ ? &*run_ : nullptr;
}

ChunkLayout BackFetchMeeting::layout() const {
  std::lock_guard<std::mutex> lock(mu_);
  return layout_;
}

size_t BackFetchMeeting::held_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return held_bytes_;
}

size_t BackFetchMeeting::batch_at(size_t top, size_t window) const {
  std::lock_guard<std::mutex> lock(mu_);
  window = std::max<size_t>(1, window);
  // Chunks below floor_ (another tensor-parallel rank's run ended there) are of no
  // more use than the front's.
  return top + 1 >= std::max(claimed_, floor_) + kBackFetchBatchGap * window ? window : 1;
}

void fetch_back_into(RemoteTier& remote, std::span<const int32_t> tokens, size_t max_positions,
                     BackFetchMeeting& meeting) {
  RemoteBackFetch run;
  try {
    if (meeting.begin(remote.layout()))
      run = remote.fetch_back(tokens, max_positions, [&](size_t c, std::string&& value, size_t offset) {
        return meeting.take(c, std::move(value), offset);
      }, [&](size_t top) { return meeting.batch_at(top, remote.config().back_fetch_window); });
    else
      run.stop_reason = "the front had computed the prefix before the fetch started";
  } catch (const std::exception& e) {  // store faults never throw; anything else ends the run
    run = RemoteBackFetch{};
    run.stop_reason = e.what();
  }
  meeting.deliver(std::move(run));
}

MetPrefix meet_back_fetch(BackFetchMeeting& meeting, const std::function<void(size_t chunk)>& prefill_chunk,
                          FullTier& tier, uint64_t id, bool wait_for_run, const MeetingRanks* ranks) {
  const auto go_on = [&](size_t f) { return ranks ? ranks->any(meeting.claim(f)) : meeting.claim(f); };
  size_t f = 0;
  try {
    meeting.bind(tier, id);
    while (go_on(f)) prefill_chunk(f++);
  } catch (...) {
    (void)meeting.stop();
    try {
      tier.drop_ahead(id);
    } catch (...) {  // the entry is gone: nothing was left in it
    }
    throw;
  }
  // The run the fetcher took: [held.first, held.end), written ahead into the entry;
  // held.first <= f unless it took none (a chunk a rank's front also prefilled is
  // the front's, rewritten in place).
  RemoteBackFetch held = meeting.stop();
  MetPrefix out;
  out.front_chunks = f;
  const bool took = held.end > 0;
  const size_t mine = took && held.first <= f && f < held.end ? held.end - f : 0;
  const size_t used = ranks ? ranks->min(f + mine) - f : mine;
  const size_t counted = held.end;  // the fetch found chunks [0, counted) in the store
  if (used > 0) tier.join_ahead(id, (f + used) * meeting.chunk_tokens());
  else tier.drop_ahead(id);
  out.fetched_chunks = used;
  const RemoteBackFetch* run = wait_for_run ? &meeting.wait() : meeting.delivered();
  if (run != nullptr) {
    // The store holds chunks [0, run->end), chunk run->failed_at missing or bad
    // among them: the front may have computed those.
    out.publish_from = std::min({f + used, run->end, run->failed_at});
    out.run = *run;
  } else if (took) {
    // The fetch counted [0, held.end) in the store before its first chunk; it had
    // not ended, so no chunk it held failed.
    out.publish_from = counted;
    out.run.first = held.first;
    out.run.end = out.run.failed_at = counted;
    out.run.bytes = held.bytes;
  } else {
    out.publish_known = false;
    out.run.stop_reason = "the store's answer was not in when the front had computed the prefix";
  }
  if (ranks) {  // one publish for the group: from the least, skipping held chunks if any rank cannot say
    out.publish_from = ranks->min(out.publish_from);
    out.publish_known = !ranks->any(!out.publish_known);
  }
  return out;
}

}  // namespace vc
