// A persistent thread pool for the kernels: parallel_for splits [0, n) into at most
// `threads` contiguous, grain-aligned parts; the calling thread runs the first part.
//
// Decode runs ~50 small matmuls per token (a few microseconds each), so the hand-off
// must cost well under a microsecond: workers spin on a generation counter for a
// short while after each job (a pause-loop, so the core is not starved) and only
// then block in a futex (std::atomic::wait). The caller only issues the wake-up
// system call when a worker has announced it is asleep, and likewise waits for the
// workers by spinning first. With one thread everything runs inline.
#include "kernels/cpu/thread_pool.hpp"

#include "kernels/error.hpp"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace vc::cpu {
namespace {

// How long a thread waits actively before it blocks: long enough to span the gaps
// between the matmuls of one decode step, short enough not to burn a core when idle.
// The first few microseconds are a pure pause-loop (lowest hand-off latency); after
// that the thread also yields, so that when the machine is oversubscribed the thread
// it is waiting for gets the core instead of losing a whole scheduler time slice.
constexpr auto kPureSpinTime = std::chrono::microseconds(5);
constexpr auto kSpinTime = std::chrono::microseconds(200);

// Spin (pause yields the pipeline to a sibling hyper-thread and saves power) until
// `done()` or the spin time is over.
template <class Pred>
bool spin_until(Pred done) {
  const auto start = std::chrono::steady_clock::now();
  bool yielding = false;
  for (uint32_t i = 1;; ++i) {
    if (done()) return true;
    if (yielding) {
      std::this_thread::yield();
    } else {
      _mm_pause();
    }
    if ((i & 31u) == 0) {
      const auto waited = std::chrono::steady_clock::now() - start;
      if (waited > kSpinTime) return false;
      yielding = waited > kPureSpinTime;
    }
  }
}

}  // namespace

struct ThreadPool::Impl {
  // The current job. Written by the caller before it bumps `generation` (release),
  // read by the workers after they observe the bump (acquire).
  const std::function<void(size_t, size_t)>* fn = nullptr;
  std::vector<size_t> bounds;  // part p is [bounds[p], bounds[p + 1])
  size_t parts = 0;
  bool stop = false;

  // Separate cache lines: the caller writes `generation`, workers write `pending`.
  alignas(64) std::atomic<uint32_t> generation{0};
  alignas(64) std::atomic<uint32_t> pending{0};
  std::atomic<int> sleepers{0};              // workers blocked on `generation`
  std::atomic<bool> caller_sleeping{false};  // caller blocked on `pending`

  std::mutex error_mu;
  std::exception_ptr error;
  std::vector<std::thread> workers;

  void record_error(std::exception_ptr e) {
    std::lock_guard<std::mutex> lock(error_mu);
    if (!error) error = std::move(e);
  }

  void run_part(size_t p) {
    try {
      (*fn)(bounds[p], bounds[p + 1]);
    } catch (...) {
      record_error(std::current_exception());
    }
  }

  void worker_loop(size_t index) {
    uint32_t seen = 0;
    for (;;) {
      if (!spin_until([&] { return generation.load(std::memory_order_acquire) != seen; })) {
        // Announce the sleep before re-checking; pairs with the caller's bump-then-
        // read-sleepers (both sequentially consistent), so no wake-up is lost.
        sleepers.fetch_add(1, std::memory_order_seq_cst);
        while (generation.load(std::memory_order_seq_cst) == seen) {
          generation.wait(seen, std::memory_order_seq_cst);
        }
        sleepers.fetch_sub(1, std::memory_order_relaxed);
      }
      seen = generation.load(std::memory_order_acquire);
      if (stop) return;
      if (index < parts) run_part(index);
      if (pending.fetch_sub(1, std::memory_order_seq_cst) == 1 &&
          caller_sleeping.load(std::memory_order_seq_cst)) {
        pending.notify_one();
      }
    }
  }

  void wait_for_workers() {
    if (spin_until([&] { return pending.load(std::memory_order_acquire) == 0; })) return;
    caller_sleeping.store(true, std::memory_order_seq_cst);
    for (uint32_t p; (p = pending.load(std::memory_order_seq_cst)) != 0;) {
      pending.wait(p, std::memory_order_seq_cst);
    }
    caller_sleeping.store(false, std::memory_order_relaxed);
  }

  // Stops the workers (between jobs) and joins them.
  void stop_workers() {
    if (workers.empty()) return;
    stop = true;
    generation.fetch_add(1, std::memory_order_seq_cst);
    generation.notify_all();
    for (auto& t : workers) t.join();
    workers.clear();
  }

  void start_job() {
    pending.store(uint32_t(workers.size()), std::memory_order_relaxed);
    generation.fetch_add(1, std::memory_order_seq_cst);
    if (sleepers.load(std::memory_order_seq_cst) > 0) generation.notify_all();
  }
};

ThreadPool::ThreadPool(int threads) : impl_(new Impl), threads_(std::max(threads, 1)) {
  try {
    impl_->bounds.resize(size_t(threads_) + 1);
    for (int i = 1; i < threads_; ++i) {
      impl_->workers.emplace_back([this, i] { impl_->worker_loop(size_t(i)); });
    }
  } catch (const std::exception& e) {
    // No destructor runs for a constructor that throws: the workers started so far
    // (which use impl_) stop here, before it is freed.
    const size_t started = impl_->workers.size() + 1;
    impl_->stop_workers();
    delete impl_;
    throw Error("thread pool of " + std::to_string(threads_) + " threads: could start only " +
                std::to_string(started) + " (" + e.what() + ")");
  }
}

ThreadPool::~ThreadPool() {
  impl_->stop_workers();
  delete impl_;
}

void ThreadPool::parallel_for(size_t n, size_t grain,
                              const std::function<void(size_t, size_t)>& fn) {
  if (n == 0) return;
  grain = std::max<size_t>(grain, 1);
  const size_t units = (n + grain - 1) / grain;
  const size_t parts = std::min(units, size_t(threads_));
  if (parts <= 1) {  // one part: no hand-off at all
    fn(0, n);
    return;
  }
  // Contiguous parts of whole grains; the first `extra` parts get one grain more.
  Impl& s = *impl_;
  const size_t base = units / parts, extra = units % parts;
  size_t unit = 0;
  for (size_t p = 0; p < parts; ++p) {
    s.bounds[p] = std::min(n, unit * grain);
    unit += base + (p < extra ? 1 : 0);
  }
  s.bounds[parts] = n;
  s.parts = parts;
  s.fn = &fn;
  s.error = nullptr;

  s.start_job();
  s.run_part(0);
  s.wait_for_workers();
  if (s.error) std::rethrow_exception(s.error);
}

void ThreadPool::run_on_each(const std::function<void(int thread)>& fn) {
  // threads_ parts of one unit each: part p runs on worker p (the caller is part 0).
  parallel_for(size_t(threads_), 1, [&](size_t begin, size_t end) {
    for (size_t t = begin; t < end; ++t) fn(int(t));
  });
}

}  // namespace vc::cpu
