// The meeting of a front prefill and a back fetch (see the header).
#include "kvtiers/remote/back_fetch_meeting.hpp"

#include <algorithm>

#include "kvtiers/full_tier.hpp"
#include "kernels/error.hpp"

namespace vc {

bool BackFetchMeeting::wanted(size_t c) {
  if (c < front_.load()) return false;
  lowest_.store(c);
  return true;
}

void BackFetchMeeting::deliver(RemoteBackFetch run, const ChunkLayout& layout) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (run_) return;
    run_ = std::move(run);
    layout_ = layout;
  }
  cv_.notify_all();
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

void BackFetchMeeting::append(size_t from, FullTier& tier, uint64_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!run_) throw Error("remote tier: appending a back fetch that has not been delivered");
  append_back_chunks(layout_, *run_, from, tier, id);
}

void BackFetchMeeting::drop_values() {
  std::lock_guard<std::mutex> lock(mu_);
  if (run_) std::vector<std::pair<std::string, size_t>>().swap(run_->values);
}

MetPrefix meet_back_fetch(BackFetchMeeting& meeting, const std::function<void(size_t chunk)>& prefill_chunk,
                          FullTier& tier, uint64_t id, bool wait_for_run) {
  size_t f = 0;
  try {
    while (meeting.may_take(f)) {
      prefill_chunk(f);
      meeting.took(++f);
    }
  } catch (...) {
    meeting.stop();
    throw;
  }
  meeting.stop();
  MetPrefix out;
  out.front_chunks = f;
  const RemoteBackFetch* run = wait_for_run || meeting.claimed() ? &meeting.wait() : meeting.delivered();
  if (run == nullptr) {
    out.run.stop_reason = "the store's answer was not in when the front had computed the prefix";
    return out;
  }
  const size_t used = f < run->end && run->first <= f ? run->end - f : 0;
  if (used > 0) meeting.append(f, tier, id);
  out.fetched_chunks = used;
  // The store holds chunks [0, run->end), chunk run->failed_at missing or bad among
  // them: the front may have computed those.
  out.publish_from = std::min({f + used, run->end, run->failed_at});
  out.run.first = run->first;
  out.run.end = run->end;
  out.run.failed_at = run->failed_at;
  out.run.bytes = run->bytes;
  out.run.seconds = run->seconds;
  out.run.stop_reason = run->stop_reason;
  meeting.drop_values();
  return out;
}

}  // namespace vc
