// The engine's rank-group building block: RankGroup runs an operation on every
// rank at once and survives a failing rank.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "kernels/error.hpp"
#include "runtime/rank_group.hpp"
#include "tests/error_naming.hpp"

namespace vc {
namespace {

TEST(rank_group, runs_every_rank_at_once_with_rank_zero_on_the_calling_thread) {
  RankGroup g(std::make_shared<CpuCommunicator>(3));
  std::vector<float> sums(3);
  std::thread::id rank0;
  g.run([&](int r) {
    if (r == 0) rank0 = std::this_thread::get_id();
    float x = float(r + 1);
    g.comm()->all_reduce_sum(r, &x, 1);  // needs every rank at once
    sums[size_t(r)] = x;
  });
  EXPECT_EQ(rank0, std::this_thread::get_id());
  EXPECT_EQ(sums, (std::vector<float>{6, 6, 6}));
}

TEST(rank_group, a_failing_rank_fails_the_operation_with_its_own_error_and_the_group_runs_again) {
  RankGroup g(std::make_shared<CpuCommunicator>(2));
  test::expect_error_naming(
      [&] {
        g.run([&](int r) {
          if (r == 1) throw Error("rank one's disk is gone");
          float x = 1;
          g.comm()->all_reduce_sum(r, &x, 1);  // rank 0 waits here until the abort
        });
      },
      "rank one's disk is gone");
  EXPECT_EQ(g.comm()->aborted_by(), -1) << "reset once every rank returned";
  std::atomic<int> ran{0};
  g.run([&](int r) {
    float x = 1;
    g.comm()->all_reduce_sum(r, &x, 1);
    if (x == 2) ++ran;
  });
  EXPECT_EQ(ran.load(), 2);
}

TEST(rank_group, each_rank_keeps_its_own_thread_from_one_operation_to_the_next) {
  RankGroup g(std::make_shared<CpuCommunicator>(3));
  std::vector<std::thread::id> first(3), later(3);
  g.run([&](int r) { first[size_t(r)] = std::this_thread::get_id(); });
  for (int i = 0; i < 500; ++i) {  // a decode's worth of draft steps
    g.run([&](int r) {
      later[size_t(r)] = std::this_thread::get_id();
      float x = 1;
      g.comm()->all_reduce_sum(r, &x, 1);
      if (x != 3) throw Error("rank " + std::to_string(r) + " saw a partial all-reduce");
    });
    ASSERT_EQ(later, first) << "operation " << i;
  }
  EXPECT_EQ(first[0], std::this_thread::get_id());
  EXPECT_NE(first[1], first[0]);
  EXPECT_NE(first[2], first[1]);
  EXPECT_NE(first[2], first[0]);
}

TEST(rank_group, a_moved_group_runs_on_and_a_destroyed_one_joins_its_parked_threads) {
  RankGroup a(std::make_shared<CpuCommunicator>(2));
  std::atomic<int> calls{0};
  a.run([&](int) { ++calls; });
  RankGroup b(std::move(a));
  b.run([&](int) { ++calls; });
  EXPECT_EQ(calls.load(), 4);
  {
    RankGroup c(std::make_shared<CpuCommunicator>(4));
    c.run([&](int) { ++calls; });
  }  // c's three rank threads are parked here and must be joined, not left waiting
  EXPECT_EQ(calls.load(), 8);
}

TEST(rank_group, without_a_communicator_it_is_one_rank_on_the_calling_thread) {
  RankGroup g(nullptr);
  EXPECT_EQ(g.degree(), 1);
  int calls = 0;
  g.run([&](int r) {
    EXPECT_EQ(r, 0);
    ++calls;
  });
  EXPECT_EQ(calls, 1);
  test::expect_error_naming([&] { g.run([](int) { throw Error("alone"); }); }, "alone");
}

}  // namespace
}  // namespace vc
