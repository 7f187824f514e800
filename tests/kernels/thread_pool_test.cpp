// Tests of vc::cpu::ThreadPool: coverage, contiguity, grain alignment, inline
// single-thread execution, exceptions and reuse, and a pool whose threads cannot
// all start.
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <atomic>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "kernels/cpu/thread_pool.hpp"
#include "kernels/error.hpp"

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

// Threads of this process now.
[[maybe_unused]] size_t live_threads() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

TEST(thread_pool, a_pool_whose_threads_cannot_all_start_stops_those_that_did_and_says_so) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "limits the address space, which the sanitizers' shadow memory needs";
#else
  // In a child (one thread after fork) whose address space has room for a few
  // thread stacks only, a pool of 256 threads fails to start; the workers that did
  // start must be stopped and joined (they use the pool's state), not leaked.
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    size_t pages = 0;
    std::ifstream("/proc/self/statm") >> pages;
    const rlim_t room = rlim_t(pages) * rlim_t(sysconf(_SC_PAGESIZE)) + (rlim_t(64) << 20);
    const rlimit lim{room, room};
    if (setrlimit(RLIMIT_AS, &lim) != 0) _exit(10);
    try {
      ThreadPool pool(256);
      _exit(11);  // all started: the limit did not bite
    } catch (const vc::Error& e) {
      if (std::string(e.what()).find("thread pool of 256 threads: could start only") == std::string::npos)
        _exit(12);
    } catch (...) {
      _exit(13);
    }
    _exit(live_threads() == 1 ? 0 : 14);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died (signal " << WTERMSIG(status) << ")";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10: setrlimit failed, 11: every thread started, 12: another "
                                        "message, 13: another exception, 14: threads left running";
#endif
}

}  // namespace
}  // namespace vc::cpu
