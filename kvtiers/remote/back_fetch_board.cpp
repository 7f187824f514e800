// The tensor-parallel ranks' board of ended back fetches (back_fetch_board.hpp).
#include "kvtiers/remote/back_fetch_board.hpp"

#include <algorithm>

namespace vc {

namespace {

uint64_t hash_tokens(std::span<const int32_t> tokens) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the tokens' bytes
  for (int32_t t : tokens)
    for (int b = 0; b < 4; ++b) h = (h ^ ((uint32_t(t) >> (8 * b)) & 0xffu)) * 1099511628211ull;
  return h;
}

}  // namespace

std::pair<size_t, std::string> group_floor(const BackFetchMeeting& ended, size_t rank) {
  const RemoteBackFetch* run = ended.delivered();
  const bool took = run != nullptr && run->end > run->first;
  const size_t floor = took ? run->first : ended.chunks();
  return {floor, "tensor-parallel rank " + std::to_string(rank) + "'s run " +
                     (took ? "reaches down to chunk " + std::to_string(floor)
                           : std::string("took no chunk")) +
                     ": the group keeps no chunk below it"};
}

void BackFetchBoard::join(size_t request, size_t rank, std::span<const int32_t> prompt,
                          BackFetchMeeting& m) {
  const uint64_t h = hash_tokens(prompt);
  std::lock_guard<std::mutex> lock(mu_);
  slots_.at(rank) = {request, h, &m};
  // Floors of requests two or more behind this one are of no use any more.
  std::erase_if(floors_, [&](const Floor& f) { return f.request + 2 <= request; });
  for (const Floor& f : floors_)
    if (f.request == request && f.prompt == h && f.rank != rank) m.keep_above(f.chunk, f.why);
}

void BackFetchBoard::ended(size_t request, size_t rank, const BackFetchMeeting& m) {
  auto [floor, why] = group_floor(m, rank);
  std::lock_guard<std::mutex> lock(mu_);
  const Slot& mine = slots_.at(rank);
  if (mine.meeting != &m || mine.request != request) return;  // not joined: posts nothing
  for (size_t o = 0; o < slots_.size(); ++o) {
    const Slot& s = slots_[o];
    if (o != rank && s.meeting != nullptr && s.request == request && s.prompt == mine.prompt)
      s.meeting->keep_above(floor, why);
  }
  floors_.push_back({request, rank, floor, mine.prompt, std::move(why)});
}

void BackFetchBoard::leave(size_t rank) {
  std::lock_guard<std::mutex> lock(mu_);
  slots_.at(rank).meeting = nullptr;
}

}  // namespace vc
