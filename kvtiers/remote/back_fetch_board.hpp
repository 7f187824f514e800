// Where the ranks of a tensor-parallel group that each run their own back fetch
// (generate --tp: a Generator per rank, each fetching its KV heads' chunks) tell
// one another that a run has ended. The group keeps only the chunks every rank
// holds, so once one rank's run ends at chunk c (or took none), the others'
// fetches stop below c (BackFetchMeeting::keep_above): what they would fetch
// there the fronts compute anyway. The engine's net_fetcher, which runs the ranks'
// fetches itself, does the same without a board.
#pragma once
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kvtiers/remote/back_fetch_meeting.hpp"

namespace vc {

/// The floor a rank's ended run sets for the other ranks of its group: the run's
/// first chunk, or every chunk when it took none; and the refusal that names it.
[[nodiscard]] std::pair<size_t, std::string> group_floor(const BackFetchMeeting& ended,
                                                         size_t rank);

class BackFetchBoard {
 public:
  explicit BackFetchBoard(size_t ranks) : slots_(ranks) {}

  /// Rank `rank`'s meeting for its request number `request` (each rank counts the
  /// requests it fetches for; the ranks take them in the same order) over `prompt`.
  /// The floors other ranks already posted for that request apply to it at once.
  void join(size_t request, size_t rank, std::span<const int32_t> prompt, BackFetchMeeting& m);
  /// Rank `rank`'s run of `request` has ended (m delivered): the other ranks'
  /// meetings of the same request keep above its floor, and so do later joiners.
  void ended(size_t request, size_t rank, const BackFetchMeeting& m);
  /// Rank `rank`'s meeting goes away (before it is destroyed): nothing reaches it
  /// after this returns.
  void leave(size_t rank);

 private:
  struct Slot {
    size_t request = 0;
    uint64_t prompt = 0;  // hash of the request's tokens
    BackFetchMeeting* meeting = nullptr;
  };
  struct Floor {
    size_t request = 0, rank = 0, chunk = 0;
    uint64_t prompt = 0;
    std::string why;
  };
  std::mutex mu_;
  std::vector<Slot> slots_;    // per rank
  std::vector<Floor> floors_;  // posted by ended runs, of recent requests
};

}  // namespace vc
