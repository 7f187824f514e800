// A small persistent thread pool that splits an index range into contiguous parts.
#pragma once
#include <cstddef>
#include <functional>

namespace vc::cpu {

/// Runs `fn(begin, end)` over [0, n) split into at most `threads()` contiguous parts,
/// the calling thread taking the first. Reusable; not re-entrant.
class ThreadPool {
 public:
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  [[nodiscard]] int threads() const { return threads_; }
  /// Parts are aligned to `grain` (the last part takes the remainder).
  void parallel_for(size_t n, size_t grain, const std::function<void(size_t, size_t)>& fn);
  /// Runs `fn(t)` once on each of the pool's threads, t = 0 on the calling thread and
  /// t on worker t (thread binding, per-thread setup).
  void run_on_each(const std::function<void(int thread)>& fn);

 private:
  struct Impl;
  Impl* impl_;
  int threads_;
};

}  // namespace vc::cpu
