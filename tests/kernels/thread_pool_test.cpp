// Tests of vc::cpu::ThreadPool: coverage, contiguity, grain alignment, inline
// single-thread execution, exceptions and reuse.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "kernels/cpu/thread_pool.hpp"

namespace vc::cpu {
namespace {

struct Part {
  size_t begin, end;
  std::thread::id thread;
};

std::vector<Part> record_parts(ThreadPool& pool, size_t n, size_t grain) {
  std::mutex mu;
  std::vector<Part> parts;
  pool.parallel_for(n, grain, [&](size_t b, size_t e) {
    std::lock_guard<std::mutex> lock(mu);
    parts.push_back({b, e, std::this_thread::get_id()});
  });
  std::sort(parts.begin(), parts.end(), [](const Part& a, const Part& b) { return a.begin < b.begin; });
  return parts;
}

TEST(thread_pool, parts_are_contiguous_grain_aligned_and_cover_the_range_once) {
  for (int threads : {1, 2, 3, 4}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.threads(), threads);
    for (size_t n : {1u, 2u, 5u, 12u, 13u, 100u, 1000u, 1003u}) {
      for (size_t grain : {1u, 4u, 12u, 64u}) {
        const auto parts = record_parts(pool, n, grain);
        ASSERT_FALSE(parts.empty());
        ASSERT_LE(parts.size(), size_t(threads));
        EXPECT_EQ(parts.front().begin, 0u);
        EXPECT_EQ(parts.back().end, n);
        for (size_t i = 0; i < parts.size(); ++i) {
          EXPECT_LT(parts[i].begin, parts[i].end);
          EXPECT_EQ(parts[i].begin % grain, 0u) << "n=" << n << " grain=" << grain;
          if (i + 1 < parts.size()) {
            EXPECT_EQ(parts[i].end, parts[i + 1].begin);
            EXPECT_EQ(parts[i].end % grain, 0u);
          }
        }
      }
    }
  }
}

TEST(thread_pool, the_calling_thread_runs_the_first_part) {
  ThreadPool pool(3);
  const auto parts = record_parts(pool, 300, 1);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0].thread, std::this_thread::get_id());
  EXPECT_NE(parts[1].thread, std::this_thread::get_id());
  EXPECT_NE(parts[2].thread, parts[1].thread);
}

TEST(thread_pool, one_thread_runs_the_whole_range_inline) {
  ThreadPool pool(1);
  const auto parts = record_parts(pool, 777, 8);
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(parts[0].begin, 0u);
  EXPECT_EQ(parts[0].end, 777u);
  EXPECT_EQ(parts[0].thread, std::this_thread::get_id());
}

TEST(thread_pool, an_empty_range_calls_nothing) {
  ThreadPool pool(2);
  int calls = 0;
  pool.parallel_for(0, 4, [&](size_t, size_t) { ++calls; });
  EXPECT_EQ(calls, 0);
}

TEST(thread_pool, an_exception_in_any_part_reaches_the_caller_and_the_pool_stays_usable) {
  ThreadPool pool(2);
  EXPECT_THROW(pool.parallel_for(100, 1,
                                 [](size_t b, size_t) {
                                   if (b > 0) throw std::runtime_error("worker part");
                                 }),
               std::runtime_error);
  EXPECT_THROW(pool.parallel_for(100, 1,
                                 [](size_t b, size_t) {
                                   if (b == 0) throw std::runtime_error("caller part");
                                 }),
               std::runtime_error);
  std::atomic<size_t> sum{0};
  pool.parallel_for(100, 1, [&](size_t b, size_t e) { sum += e - b; });
  EXPECT_EQ(sum.load(), 100u);
}

TEST(thread_pool, many_tiny_jobs_in_a_row_each_see_all_their_indices) {
  ThreadPool pool(2);
  std::vector<int> hits(64);
  for (int job = 0; job < 5000; ++job) {
    pool.parallel_for(64, 4, [&](size_t b, size_t e) {
      for (size_t i = b; i < e; ++i) hits[i] += 1;
    });
  }
  for (int h : hits) EXPECT_EQ(h, 5000);
}

TEST(thread_pool, sleeping_workers_wake_for_the_next_job) {
  ThreadPool pool(2);
  for (int job = 0; job < 3; ++job) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // past the spin time
    std::atomic<size_t> sum{0};
    pool.parallel_for(1000, 1, [&](size_t b, size_t e) { sum += e - b; });
    EXPECT_EQ(sum.load(), 1000u);
  }
}

}  // namespace
}  // namespace vc::cpu
