// Ranks as persistent threads of the calling actor (see rank_group.hpp).
#include "runtime/rank_group.hpp"

#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace vc {

/// Threads for ranks 1..d-1, parked on a condition variable between operations.
/// An operation is a generation number: each thread runs the job once per new
/// generation and counts itself done; the caller waits for every count.
class RankThreads {
 public:
  using Job = std::function<void(int)>;

  explicit RankThreads(int degree) {
    threads_.reserve(size_t(degree - 1));
    for (int r = 1; r < degree; ++r) threads_.emplace_back([this, r] { loop(r); });
  }
  ~RankThreads() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    start_.notify_all();
    for (auto& t : threads_) t.join();
  }
  RankThreads(const RankThreads&) = delete;
  RankThreads& operator=(const RankThreads&) = delete;

  /// Starts `job` on ranks 1..; returns at once.
  void start(const Job& job) {
    {
      std::lock_guard lock(mu_);
      job_ = &job;
      done_ = 0;
      ++generation_;
    }
    start_.notify_all();
  }
  /// Waits until every rank thread has returned from the job.
  void wait() {
    std::unique_lock lock(mu_);
    finished_.wait(lock, [&] { return done_ == threads_.size(); });
    job_ = nullptr;
  }

 private:
  void loop(int r) {
    uint64_t seen = 0;
    for (;;) {
      const Job* job = nullptr;
      {
        std::unique_lock lock(mu_);
        start_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        job = job_;
      }
      (*job)(r);  // never throws: RankGroup::run's wrapper catches
      {
        std::lock_guard lock(mu_);
        ++done_;
      }
      finished_.notify_one();
    }
  }

  std::mutex mu_;
  std::condition_variable start_;
  std::condition_variable finished_;
  const Job* job_ = nullptr;
  uint64_t generation_ = 0;
  size_t done_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

RankGroup::RankGroup(std::shared_ptr<Communicator> comm) : comm_(std::move(comm)) {}
RankGroup::~RankGroup() = default;
RankGroup::RankGroup(RankGroup&&) noexcept = default;
RankGroup& RankGroup::operator=(RankGroup&&) noexcept = default;

void RankGroup::run(const std::function<void(int)>& f) const {
  const int d = degree();
  if (d == 1) {
    f(0);
    return;
  }
  if (!threads_) threads_ = std::make_unique<RankThreads>(d);
  std::vector<std::exception_ptr> errors(static_cast<size_t>(d));
  const RankThreads::Job one = [&](int r) {
    try {
      f(r);
    } catch (const std::exception& e) {
      errors[size_t(r)] = std::current_exception();
      comm_->abort(r, e.what());
    } catch (...) {
      errors[size_t(r)] = std::current_exception();
      comm_->abort(r, "unknown error");
    }
  };
  threads_->start(one);
  one(0);
  threads_->wait();
  const int first = comm_->aborted_by();
  if (first >= 0) {
    comm_->reset();  // every rank has returned: the next operation starts afresh
    std::rethrow_exception(errors[size_t(first)]);
  }
}

}  // namespace vc
