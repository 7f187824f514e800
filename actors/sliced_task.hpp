// A function run a slice at a time on a thread of its own, for an actor that must
// keep answering its mailbox while a long piece of work is under way: resume() lets
// the function run until it calls SlicedTask::yield() (or returns) and waits for
// that, so the function and its caller never run at once and everything they share
// is touched by one of them at a time. The engine's drafter runs each prompt's
// prefill this way, a chunk per slice, and steps the other requests' drafts between
// slices (actors/workers.cpp).
#pragma once
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace vc::actors {

class SlicedTask {
 public:
  /// `fn` starts at the first resume(), on a new thread.
  explicit SlicedTask(std::function<void()> fn);
  /// A task not run to its end is cancelled: its yield() throws
  /// SlicedTask::Cancelled, which unwinds it (its cleanups run), and the thread is
  /// joined.
  ~SlicedTask();
  SlicedTask(const SlicedTask&) = delete;
  SlicedTask& operator=(const SlicedTask&) = delete;

  /// Runs the next slice and waits for its end. true: the function has returned;
  /// what it threw is rethrown here. Once ended, returns true at once.
  bool resume();
  [[nodiscard]] bool ended() const { return ended_; }

  /// From a task's thread: ends the slice and waits for the next resume(). From any
  /// other thread: nothing. Throws Cancelled in a task being dropped.
  static void yield();
  /// Whether the calling thread is a task's (yield() would end its slice).
  [[nodiscard]] static bool in_task();
  /// Thrown by yield() in a task being dropped; not a std::exception, so that only
  /// catch (...) cleanups (which rethrow) see it.
  struct Cancelled {};

 private:
  void run();
  void hand_over(bool to_task, std::unique_lock<std::mutex>& lock);

  std::function<void()> fn_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool task_turn_ = false;  // the task runs (or may); else its caller does
  bool cancel_ = false;
  bool ended_ = false;
  std::exception_ptr error_;
  std::thread thread_;
};

}  // namespace vc::actors
