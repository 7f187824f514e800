// Tensor-parallel collectives: the communicator a sharded forward pass reduces
// through, and its in-process CPU implementation (one thread per rank).
//
// Determinism: an all-reduce adds the ranks' partials in rank order,
// ((p0 + p1) + p2) + ..., element by element, so every rank gets the same bits and a
// row's result never depends on the other rows of the pass (batch invariance holds
// at any degree). The NCCL implementation (kernels/cuda, GPU builds) documents the
// settings that give it the same property.
#pragma once
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace vc {

class Communicator {
 public:
  virtual ~Communicator() = default;
  [[nodiscard]] virtual int degree() const = 0;
  /// Every rank calls with its partial `data` ([n] floats); on return each rank's
  /// `data` holds the sum over ranks in rank order, identical on every rank.
  virtual void all_reduce_sum(int rank, float* data, size_t n) = 0;
  /// Every rank gives [n] floats; `out` ([degree * n]) receives them in rank order.
  virtual void all_gather(int rank, const float* data, size_t n, float* out) = 0;
  /// Called by a rank that failed: every rank waiting in a collective, or entering
  /// one later, throws vc::Error naming that rank and `why` (no rank hangs).
  virtual void abort(int rank, const std::string& why) = 0;
  /// The rank that aborted first, or -1.
  [[nodiscard]] virtual int aborted_by() const = 0;
  /// Called once every rank has returned from a failed request: clears the abort so
  /// the next request runs (vc::Error when the group cannot be used again).
  virtual void reset() = 0;
};

/// Ranks are threads of one process; collectives meet at a barrier and read each
/// other's buffers in place (rank r sums elements [r*n/d, (r+1)*n/d) of every rank,
/// in rank order, into a shared result that every rank then copies).
class CpuCommunicator final : public Communicator {
 public:
  explicit CpuCommunicator(int degree);
  [[nodiscard]] int degree() const override { return degree_; }
  void all_reduce_sum(int rank, float* data, size_t n) override;
  void all_gather(int rank, const float* data, size_t n, float* out) override;
  void abort(int rank, const std::string& why) override;
  [[nodiscard]] int aborted_by() const override;
  void reset() override;

 private:
  void check_rank(int rank, const char* op) const;
  /// Waits until every rank has arrived (or throws when one aborted). With
  /// size_result, the last rank to arrive sizes result_ for the largest n_.
  void barrier(bool size_result = false);

  const int degree_;
  std::vector<const float*> in_;  // per rank, the buffer of the current collective
  std::vector<size_t> n_;         // per rank, its element count (checked equal)
  std::vector<float> result_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  unsigned long generation_ = 0;
  int aborted_by_ = -1;
  std::string abort_why_;
};

}  // namespace vc
