// SlicedTask: a function run a slice at a time on its own thread, never at once with
// its caller; what it throws reaches the caller; dropped unfinished, it unwinds.
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "actors/sliced_task.hpp"

namespace {

using vc::actors::SlicedTask;

TEST(sliced_task, runs_one_slice_per_resume_and_never_at_once_with_its_caller) {
  std::vector<std::string> log;  // unguarded: the baton is the only guard
  std::thread::id task_thread;
  SlicedTask t([&] {
    task_thread = std::this_thread::get_id();
    for (int i = 0; i < 3; ++i) {
      log.push_back("slice " + std::to_string(i));
      SlicedTask::yield();
    }
    log.push_back("end");
  });
  EXPECT_FALSE(t.ended());
  for (int i = 0; i < 3; ++i) {
    EXPECT_FALSE(t.resume());
    log.push_back("caller " + std::to_string(i));
  }
  EXPECT_TRUE(t.resume());
  EXPECT_TRUE(t.ended());
  EXPECT_TRUE(t.resume());  // ended: at once
  EXPECT_NE(task_thread, std::this_thread::get_id());
  EXPECT_EQ((std::vector<std::string>{"slice 0", "caller 0", "slice 1", "caller 1", "slice 2",
                                      "caller 2", "end"}),
            log);
}

TEST(sliced_task, what_the_function_throws_is_rethrown_by_resume) {
  SlicedTask t([] {
    SlicedTask::yield();
    throw std::runtime_error("the prompt is bad");
  });
  EXPECT_FALSE(t.resume());
  try {
    (void)t.resume();
    FAIL() << "no throw";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ("the prompt is bad", e.what());
  }
  EXPECT_TRUE(t.ended());
}

TEST(sliced_task, dropped_unfinished_it_unwinds_through_its_cleanups_and_goes_no_further) {
  std::atomic<int> cleanups{0}, slices{0};
  {
    SlicedTask t([&] {
      struct Cleanup {
        std::atomic<int>& n;
        ~Cleanup() { ++n; }
      } c{cleanups};
      try {
        for (;;) {
          ++slices;
          SlicedTask::yield();
        }
      } catch (...) {  // a cleanup that rethrows, as the drafter's prefill has
        ++cleanups;
        throw;
      }
    });
    EXPECT_FALSE(t.resume());
    EXPECT_FALSE(t.resume());
  }
  EXPECT_EQ(2, slices.load());
  EXPECT_EQ(2, cleanups.load());
  { SlicedTask never_started([&] { ++slices; }); }
  EXPECT_EQ(2, slices.load());
}

TEST(sliced_task, yield_outside_a_task_does_nothing) {
  SlicedTask::yield();
  int n = 0;
  SlicedTask t([&] { ++n; });
  EXPECT_TRUE(t.resume());
  EXPECT_EQ(1, n);
}

}  // namespace
