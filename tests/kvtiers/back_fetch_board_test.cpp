// BackFetchBoard: the ranks of a tensor-parallel group that each run their own back
// fetch (generate --tp) stop one another's fetches below what an ended run brought,
// as the engine's net_fetcher does for its group: a rank that joined before or after
// the end takes the floor; another request, another prompt or a meeting that left
// is not touched.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kvtiers/remote/back_fetch_board.hpp"
#include "kvtiers/remote/back_fetch_meeting.hpp"

namespace vc {
namespace {

const std::vector<int32_t> kPrompt = {5, 6, 7, 8, 9, 10};

// m's run as delivered: chunks [first, end).
void deliver(BackFetchMeeting& m, size_t first, size_t end) {
  RemoteBackFetch run;
  run.first = first;
  run.end = end;
  m.deliver(run);
}

TEST(back_fetch_board, a_rank_whose_run_took_no_chunk_stops_the_other_ranks_fetch) {
  BackFetchBoard board(2);
  BackFetchMeeting m0(5, 8), m1(5, 8);
  board.join(0, 0, kPrompt, m0);
  board.join(0, 1, kPrompt, m1);
  ASSERT_TRUE(m0.begin(ChunkLayout{}));
  EXPECT_TRUE(m0.take(4, "four", 0)) << "before rank 1's run ended";
  deliver(m1, 5, 5);
  board.ended(0, 1, m1);
  EXPECT_FALSE(m0.take(3, "three", 0));
  EXPECT_EQ(m0.refusal(), "tensor-parallel rank 1's run took no chunk: the group keeps no chunk below it");
  board.leave(0);
  board.leave(1);
}

TEST(back_fetch_board, a_rank_that_joins_after_another_run_ended_takes_its_floor) {
  BackFetchBoard board(3);
  BackFetchMeeting m0(5, 8), m2(5, 8);
  board.join(0, 2, kPrompt, m2);
  deliver(m2, 3, 5);
  board.ended(0, 2, m2);
  board.leave(2);
  board.join(0, 0, kPrompt, m0);
  ASSERT_TRUE(m0.begin(ChunkLayout{}));
  EXPECT_TRUE(m0.take(4, "four", 0));
  EXPECT_TRUE(m0.take(3, "three", 0));
  EXPECT_FALSE(m0.take(2, "two", 0)) << "below rank 2's run";
  EXPECT_EQ(m0.refusal(), "tensor-parallel rank 2's run reaches down to chunk 3: the group keeps no chunk below it");
  board.leave(0);
}

TEST(back_fetch_board, another_request_another_prompt_or_a_meeting_that_left_is_not_stopped) {
  BackFetchBoard board(2);
  BackFetchMeeting ended(5, 8);
  board.join(0, 1, kPrompt, ended);
  deliver(ended, 5, 5);  // took none: would stop every chunk of the same request
  board.ended(0, 1, ended);
  board.leave(1);

  BackFetchMeeting next(5, 8);  // the rank's next request
  board.join(1, 0, kPrompt, next);
  ASSERT_TRUE(next.begin(ChunkLayout{}));
  EXPECT_TRUE(next.take(2, "two", 0)) << next.refusal();
  board.leave(0);

  BackFetchMeeting other(5, 8);  // the same request number over another prompt
  const std::vector<int32_t> prompt2 = {5, 6, 7, 8, 9, 11};
  board.join(0, 0, prompt2, other);
  ASSERT_TRUE(other.begin(ChunkLayout{}));
  EXPECT_TRUE(other.take(2, "two", 0)) << other.refusal();
  board.leave(0);

  BackFetchMeeting gone(5, 8), late(5, 8);  // left before the other rank's run ended
  board.join(2, 0, kPrompt, gone);
  board.join(2, 1, kPrompt, late);
  ASSERT_TRUE(gone.begin(ChunkLayout{}));
  board.leave(0);
  deliver(late, 5, 5);
  board.ended(2, 1, late);
  EXPECT_TRUE(gone.take(2, "two", 0)) << gone.refusal();
  board.leave(1);
}

TEST(back_fetch_board, ranks_ending_and_leaving_on_their_own_threads_stop_each_other_once) {
  // Four ranks, each on a thread: join, end with an empty run, leave; whatever the
  // order, no rank's meeting is reached after it left (ASan and TSan builds run
  // this) and every rank that was still joined when another ended saw a floor.
  for (int round = 0; round < 50; ++round) {
    BackFetchBoard board(4);
    std::vector<std::unique_ptr<BackFetchMeeting>> meetings;
    for (int r = 0; r < 4; ++r) meetings.push_back(std::make_unique<BackFetchMeeting>(5, 8));
    std::vector<std::thread> ranks;
    for (size_t r = 0; r < 4; ++r)
      ranks.emplace_back([&, r] {
        board.join(size_t(round), r, kPrompt, *meetings[r]);
        deliver(*meetings[r], 5, 5);
        board.ended(size_t(round), r, *meetings[r]);
        board.leave(r);
      });
    for (auto& t : ranks) t.join();
    size_t stopped = 0;
    for (auto& m : meetings) stopped += !m->take(4, "four", 0);
    EXPECT_GE(stopped, 3u) << "all but the first rank to end joined before some other rank ended";
  }
}

}  // namespace
}  // namespace vc
