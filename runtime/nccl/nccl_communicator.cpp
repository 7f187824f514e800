// NCCL collectives for tensor-parallel ranks (see nccl_communicator.hpp).
#include "runtime/nccl/nccl_communicator.hpp"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <thread>

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/error.hpp"

namespace vc {

namespace {

void nccl_check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess)
    throw Error(std::string("NCCL: ") + what + " failed: " + ncclGetErrorString(r));
}

}  // namespace

struct NcclCommunicator::Rank {
  int device = 0;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  float* send = nullptr;  // device [capacity]
  float* recv = nullptr;  // device [degree * capacity]
  size_t capacity = 0;
  std::vector<float> host;  // [degree * n]: the gathered partials
};

int NcclCommunicator::device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

NcclCommunicator::NcclCommunicator(std::vector<int> devices) : devices_(std::move(devices)) {
  if (devices_.empty()) throw Error("NCCL communicator: no devices given");
  const int have = device_count();
  for (int d : devices_)
    if (d < 0 || d >= have)
      throw Error("NCCL communicator: CUDA device " + std::to_string(d) + " does not exist (" +
                  std::to_string(have) + " visible)");
  std::vector<ncclComm_t> comms(devices_.size());
  nccl_check(ncclCommInitAll(comms.data(), int(devices_.size()), devices_.data()), "ncclCommInitAll");
  for (size_t r = 0; r < devices_.size(); ++r) {
    auto rank = std::make_unique<Rank>();
    rank->device = devices_[r];
    rank->comm = comms[r];
    CUDA_CHECK(cudaSetDevice(rank->device));
    CUDA_CHECK(cudaStreamCreateWithFlags(&rank->stream, cudaStreamNonBlocking));
    ranks_.push_back(std::move(rank));
  }
}

NcclCommunicator::~NcclCommunicator() {
  for (auto& r : ranks_) {
    cudaSetDevice(r->device);
    if (r->send != nullptr) cudaFree(r->send);
    if (r->recv != nullptr) cudaFree(r->recv);
    if (r->stream != nullptr) cudaStreamDestroy(r->stream);
    if (r->comm != nullptr && !comms_aborted_) ncclCommDestroy(r->comm);
  }
}

void NcclCommunicator::check_rank(int rank) const {
  if (rank < 0 || rank >= degree())
    throw Error("NCCL communicator: rank " + std::to_string(rank) + " of a group of " +
                std::to_string(degree()));
  if (const int by = aborted_by_.load(); by >= 0) {
    std::lock_guard lock(mu_);
    throw Error("tensor parallelism: rank " + std::to_string(by) + " failed: " + abort_why_);
  }
}

const float* NcclCommunicator::gather(int rank, const float* data, size_t n) {
  check_rank(rank);
  Rank& r = *ranks_[size_t(rank)];
  const size_t d = size_t(degree());
  CUDA_CHECK(cudaSetDevice(r.device));
  if (n > r.capacity) {
    if (r.send != nullptr) CUDA_CHECK(cudaFree(r.send));
    if (r.recv != nullptr) CUDA_CHECK(cudaFree(r.recv));
    r.send = r.recv = nullptr;
    CUDA_CHECK(cudaMalloc(&r.send, n * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&r.recv, d * n * sizeof(float)));
    r.capacity = n;
  }
  r.host.resize(d * n);
  CUDA_CHECK(cudaMemcpyAsync(r.send, data, n * sizeof(float), cudaMemcpyHostToDevice, r.stream));
  nccl_check(ncclAllGather(r.send, r.recv, n, ncclFloat, r.comm, r.stream), "ncclAllGather");
  CUDA_CHECK(cudaMemcpyAsync(r.host.data(), r.recv, d * n * sizeof(float), cudaMemcpyDeviceToHost,
                             r.stream));
  // Waits, watching for another rank's failure: a rank that will never join this
  // collective leaves it blocked, so the group's comms are then aborted.
  cudaError_t e;
  while ((e = cudaStreamQuery(r.stream)) == cudaErrorNotReady) {
    if (aborted_by_.load() >= 0) {
      abort_comms();
      check_rank(rank);
    }
    std::this_thread::yield();
  }
  CUDA_CHECK(e);
  return r.host.data();
}

void NcclCommunicator::all_reduce_sum(int rank, float* data, size_t n) {
  if (degree() == 1) return check_rank(rank);
  const float* all = gather(rank, data, n);
  const size_t d = size_t(degree());
  for (size_t i = 0; i < n; ++i) {
    float s = all[i];
    for (size_t r = 1; r < d; ++r) s += all[r * n + i];
    data[i] = s;
  }
}

void NcclCommunicator::all_gather(int rank, const float* data, size_t n, float* out) {
  const float* all = gather(rank, data, n);
  std::copy_n(all, size_t(degree()) * n, out);
}

void NcclCommunicator::abort(int rank, const std::string& why) {
  std::lock_guard lock(mu_);
  if (aborted_by_.load() >= 0) return;
  abort_why_ = why;
  aborted_by_.store(rank);
}

void NcclCommunicator::abort_comms() {
  std::lock_guard lock(mu_);
  if (comms_aborted_) return;
  comms_aborted_ = true;
  for (auto& r : ranks_) ncclCommAbort(r->comm);
}

void NcclCommunicator::reset() {
  std::lock_guard lock(mu_);
  if (comms_aborted_)
    throw Error("NCCL communicator: the group's comms were aborted when rank " +
                std::to_string(aborted_by_.load()) + " failed inside a collective; make a new group");
  aborted_by_.store(-1);
  abort_why_.clear();
}

int NcclCommunicator::aborted_by() const { return aborted_by_.load(); }

}  // namespace vc
