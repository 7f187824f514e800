// The in-process communicator of CPU tensor parallelism.
#include "runtime/tp_comm.hpp"

#include <algorithm>

#include "kernels/error.hpp"

namespace vc {

CpuCommunicator::CpuCommunicator(int degree) : degree_(degree) {
  if (degree < 1) throw Error("tensor parallelism: degree must be >= 1, got " + std::to_string(degree));
  in_.resize(size_t(degree));
  n_.resize(size_t(degree));
}

void CpuCommunicator::check_rank(int rank, const char* op) const {
  if (rank < 0 || rank >= degree_)
    throw Error(std::string("tensor parallelism: ") + op + " from rank " + std::to_string(rank) +
                " of a group of " + std::to_string(degree_));
}

void CpuCommunicator::barrier(bool size_result) {
  std::unique_lock lock(mu_);
  auto failed = [&] {
    return Error("tensor parallelism: rank " + std::to_string(aborted_by_) + " failed: " + abort_why_);
  };
  if (aborted_by_ >= 0) throw failed();
  const unsigned long gen = generation_;
  if (++arrived_ == degree_) {
    // The last rank in: every rank is done with the previous collective's result.
    if (size_result) result_.resize(std::max(result_.size(), *std::max_element(n_.begin(), n_.end())));
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
    return;
  }
  cv_.wait(lock, [&] { return generation_ != gen || aborted_by_ >= 0; });
  if (generation_ == gen) throw failed();
}

void CpuCommunicator::all_reduce_sum(int rank, float* data, size_t n) {
  check_rank(rank, "all_reduce_sum");
  if (degree_ == 1) return;
  in_[size_t(rank)] = data;
  n_[size_t(rank)] = n;
  barrier(/*size_result=*/true);  // every rank's buffer is published, result_ sized
  for (int r = 0; r < degree_; ++r)
    if (n_[size_t(r)] != n)
      throw Error("tensor parallelism: all_reduce_sum of " + std::to_string(n) + " values on rank " +
                  std::to_string(rank) + ", " + std::to_string(n_[size_t(r)]) + " on rank " +
                  std::to_string(r));
  const size_t b = n * size_t(rank) / size_t(degree_), e = n * size_t(rank + 1) / size_t(degree_);
  for (size_t i = b; i < e; ++i) {
    float s = in_[0][i];
    for (int r = 1; r < degree_; ++r) s += in_[size_t(r)][i];
    result_[i] = s;
  }
  barrier();  // the sum is complete; nobody reads the inputs any more
  std::copy_n(result_.data(), n, data);
  // The next collective's first barrier keeps result_ until every rank has copied.
}

void CpuCommunicator::all_gather(int rank, const float* data, size_t n, float* out) {
  check_rank(rank, "all_gather");
  in_[size_t(rank)] = data;
  n_[size_t(rank)] = n;
  if (degree_ == 1) {
    std::copy_n(data, n, out);
    return;
  }
  barrier();
  for (int r = 0; r < degree_; ++r) {
    if (n_[size_t(r)] != n)
      throw Error("tensor parallelism: all_gather of " + std::to_string(n) + " values on rank " +
                  std::to_string(rank) + ", " + std::to_string(n_[size_t(r)]) + " on rank " +
                  std::to_string(r));
    std::copy_n(in_[size_t(r)], n, out + size_t(r) * n);
  }
  barrier();  // every rank has read every input
}

void CpuCommunicator::abort(int rank, const std::string& why) {
  std::lock_guard lock(mu_);
  if (aborted_by_ < 0) {
    aborted_by_ = rank;
    abort_why_ = why;
  }
  cv_.notify_all();
}

void CpuCommunicator::reset() {
  std::lock_guard lock(mu_);
  arrived_ = 0;
  ++generation_;
  aborted_by_ = -1;
  abort_why_.clear();
}

int CpuCommunicator::aborted_by() const {
  std::lock_guard lock(mu_);
  return aborted_by_;
}

}  // namespace vc
