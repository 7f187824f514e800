// Tensor-parallel collectives over NCCL, for ranks that are GPUs of one process
// (one thread per rank, as TpGenerator runs them).
//
// Determinism: NCCL's ring and tree all-reduce add the ranks' values in an order
// that depends on an element's place in the buffer (which rank starts its segment),
// so a row's bits would depend on how many rows share the pass, and batch
// invariance (DESIGN.md) would break. This communicator therefore all-gathers the
// ranks' partials (ncclAllGather: copies, no arithmetic) and every rank adds them in
// rank order, ((p0 + p1) + p2) + ..., exactly as CpuCommunicator does: the same bits
// as the CPU ranks, at degree x the traffic of a ring all-reduce. No NCCL_ALGO or
// NCCL_PROTO setting is then needed for determinism.
#pragma once
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/tp_comm.hpp"

namespace vc {

class NcclCommunicator final : public Communicator {
 public:
  /// One rank per CUDA device in `devices` (ncclCommInitAll). Throws vc::Error naming
  /// the NCCL or CUDA failure (e.g. fewer devices than asked for).
  explicit NcclCommunicator(std::vector<int> devices);
  ~NcclCommunicator() override;
  [[nodiscard]] int degree() const override { return int(devices_.size()); }
  /// `data` is host memory: staged to rank's device, gathered, summed in rank order.
  void all_reduce_sum(int rank, float* data, size_t n) override;
  void all_gather(int rank, const float* data, size_t n, float* out) override;
  void abort(int rank, const std::string& why) override;
  [[nodiscard]] int aborted_by() const override;
  /// Ready for the next request after a failure, unless a rank was blocked in a
  /// collective when it came (its comms were then aborted: vc::Error).
  void reset() override;

  /// CUDA devices visible to this process (0 when there is no driver or GPU).
  [[nodiscard]] static int device_count();

 private:
  struct Rank;
  /// Gathers rank's [n] floats into its host scratch ([degree * n]).
  const float* gather(int rank, const float* data, size_t n);
  void check_rank(int rank) const;
  /// ncclCommAbort on every rank's comm, once (unblocks a rank left in a collective).
  void abort_comms();

  std::vector<int> devices_;
  std::vector<std::unique_ptr<Rank>> ranks_;
  mutable std::mutex mu_;
  std::atomic<int> aborted_by_{-1};
  std::string abort_why_;
  bool comms_aborted_ = false;
};

}  // namespace vc
