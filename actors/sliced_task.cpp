// SlicedTask: two threads passing one baton (see the header).
#include "actors/sliced_task.hpp"

#include <utility>

namespace vc::actors {

namespace {
thread_local SlicedTask* current_task = nullptr;
}  // namespace

SlicedTask::SlicedTask(std::function<void()> fn) : fn_(std::move(fn)) {}

SlicedTask::~SlicedTask() {
  if (!thread_.joinable()) return;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (!ended_) {
      cancel_ = true;
      hand_over(true, lock);  // its yield() throws; it runs to its end
    }
  }
  thread_.join();
}

void SlicedTask::hand_over(bool to_task, std::unique_lock<std::mutex>& lock) {
  task_turn_ = to_task;
  cv_.notify_all();
  cv_.wait(lock, [&] { return task_turn_ != to_task; });
}

bool SlicedTask::resume() {
  if (ended_) return true;
  std::unique_lock<std::mutex> lock(mu_);
  if (!thread_.joinable()) {
    task_turn_ = true;
    thread_ = std::thread([this] { run(); });
    cv_.wait(lock, [&] { return !task_turn_; });
  } else {
    hand_over(true, lock);
  }
  if (!ended_) return false;
  lock.unlock();
  thread_.join();
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  return true;
}

void SlicedTask::run() {
  current_task = this;
  std::exception_ptr error;
  try {
    fn_();
  } catch (const Cancelled&) {
  } catch (...) {
    error = std::current_exception();
  }
  current_task = nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  error_ = std::move(error);
  ended_ = true;
  task_turn_ = false;
  cv_.notify_all();
}

bool SlicedTask::in_task() { return current_task != nullptr; }

void SlicedTask::yield() {
  SlicedTask* t = current_task;
  if (t == nullptr) return;
  std::unique_lock<std::mutex> lock(t->mu_);
  if (!t->cancel_) t->hand_over(false, lock);  // a cancelled task's cleanup runs on
  if (t->cancel_) throw Cancelled{};
}

}  // namespace vc::actors
