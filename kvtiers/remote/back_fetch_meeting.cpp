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

bool BackFetchMeeting::take(size_t c, std::string&& value, size_t payload_offset) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopped_ || c < front_.load()) return false;
  if (held_.values.empty()) held_.end = c + 1;
  held_.first = c;
  held_.bytes += value.size();
  held_.values.emplace_back(std::move(value), payload_offset);
  lowest_.store(c);
  return true;
}

void BackFetchMeeting::deliver(RemoteBackFetch run) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (run_) return;
    run.values.clear();
    run_ = std::move(run);
  }
  cv_.notify_all();
}

RemoteBackFetch BackFetchMeeting::stop() {
  std::lock_guard<std::mutex> lock(mu_);
  stopped_ = true;
  front_.store(chunks_);
  RemoteBackFetch out = std::move(held_);
  held_ = RemoteBackFetch{};
  std::reverse(out.values.begin(), out.values.end());
  if (out.values.empty()) out.first = out.end = 0;
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

void fetch_back_into(RemoteTier& remote, std::span<const int32_t> tokens, size_t max_positions,
                     BackFetchMeeting& meeting) {
  RemoteBackFetch run;
  try {
    if (meeting.begin(remote.layout()))
      run = remote.fetch_back(tokens, max_positions, [&](size_t c, std::string&& value, size_t offset) {
        return meeting.take(c, std::move(value), offset);
      });
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
  const auto go_on = [&](size_t f) { return ranks ? ranks->any(meeting.may_take(f)) : meeting.may_take(f); };
  size_t f = 0;
  try {
    while (go_on(f)) {
      prefill_chunk(f);
      meeting.took(++f);
    }
  } catch (...) {
    (void)meeting.stop();
    throw;
  }
  // The chunks the fetcher holds: [held.first, held.end), held.first <= f unless
  // the front took every chunk (a chunk both sides took is the front's).
  RemoteBackFetch held = meeting.stop();
  MetPrefix out;
  out.front_chunks = f;
  const size_t mine = !held.values.empty() && held.first <= f && f < held.end ? held.end - f : 0;
  const size_t used = ranks ? ranks->min(f + mine) - f : mine;
  const size_t counted = held.end;  // the fetch found chunks [0, counted) in the store
  if (used > 0) {
    held.values.resize(f + used - held.first);
    held.end = f + used;
    append_back_chunks_freeing(meeting.layout(), held, f, tier, id);
  }
  out.fetched_chunks = used;
  const RemoteBackFetch* run = wait_for_run ? &meeting.wait() : meeting.delivered();
  if (run != nullptr) {
    // The store holds chunks [0, run->end), chunk run->failed_at missing or bad
    // among them: the front may have computed those.
    out.publish_from = std::min({f + used, run->end, run->failed_at});
    out.run = *run;
  } else if (!held.values.empty()) {
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
