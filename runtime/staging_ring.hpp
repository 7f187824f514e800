// Where a verify pass's KV blocks go on a device that attends to them chunk by chunk
// as they arrive (runtime/cuda/cuda_attention.cpp's CudaPass), and which attention
// chunks each arrival completes: a ring of `ring_chunks` attention chunks of
// `chunk_blocks` blocks each, logical block b in slot b mod (ring_chunks *
// chunk_blocks), so one block table serves the whole pass. A slot is reused for
// block b only once the chunk that read its previous block (b minus the ring) was
// handed to the kernel, which holds as long as blocks come in position order, as a
// full tier's streamer sends them; other orders are an error, not a wrong result.
// Plain C++ (no CUDA), so that its rules are tested where no GPU is.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "kernels/error.hpp"

namespace vc {

class StagingRing {
 public:
  /// A pass reading `total_blocks` blocks (its longest row's), attention chunks of
  /// `chunk_blocks` blocks, a ring of `ring_chunks` chunks (0: every block of the
  /// pass its own slot).
  StagingRing(size_t total_blocks, size_t chunk_blocks, size_t ring_chunks)
      : total_(total_blocks), cb_(chunk_blocks == 0 ? 1 : chunk_blocks),
        chunks_((total_blocks + cb_ - 1) / cb_),
        ring_(ring_chunks == 0 || ring_chunks >= chunks_ ? chunks_ : ring_chunks),
        staged_(total_blocks, false), pending_(chunks_, cb_) {
    if (chunks_ > 0) pending_.back() = total_ - (chunks_ - 1) * cb_;
  }

  /// Slots the ring holds (blocks).
  [[nodiscard]] size_t slots() const { return ring_ * cb_; }
  /// Attention chunks of the pass.
  [[nodiscard]] size_t chunks() const { return chunks_; }
  /// Attention chunks the ring holds (at most the pass's).
  [[nodiscard]] size_t ring_chunks() const { return ring_; }
  [[nodiscard]] size_t chunk_blocks() const { return cb_; }
  /// The slot of logical block b.
  [[nodiscard]] size_t slot(size_t b) const { return b % slots(); }
  /// The ring chunk (0 .. ring - 1) that attention chunk j occupies.
  [[nodiscard]] size_t ring_chunk(size_t j) const { return j % ring_; }
  /// Chunks handed to the kernel so far: [0, launched()).
  [[nodiscard]] size_t launched() const { return launched_; }
  [[nodiscard]] bool staged(size_t b) const { return b < total_ && staged_[b]; }

  /// Throws unless block b may be copied into its slot now: within the pass, not
  /// staged before, and its slot's previous block's chunk already launched.
  void check_free(size_t b) const {
    if (b >= total_) throw Error("staging ring: block " + std::to_string(b) + " is past the pass's " +
                                 std::to_string(total_) + " blocks");
    if (staged_[b]) throw Error("staging ring: block " + std::to_string(b) + " was added twice");
    const size_t j = b / cb_;
    if (j >= ring_ && j - ring_ >= launched_)
      throw Error("staging ring: block " + std::to_string(b) + " would overwrite a chunk not yet read (blocks "
                  "must come in position order when the ring holds fewer than the pass's " +
                  std::to_string(chunks_) + " chunks)");
  }

  /// Marks block b staged (check_free first). Returns one past the last chunk that
  /// is now complete in order: chunks [launched(), returned) may be launched.
  size_t stage(size_t b) {
    check_free(b);  // (b is within the pass)
    staged_.at(b) = true;
    --pending_.at(b / cb_);
    size_t ready = launched_;
    while (ready < chunks_ && pending_[ready] == 0) ++ready;
    return ready;
  }

  /// Chunks [launched(), upto) were handed to the kernel.
  void launched_upto(size_t upto) { launched_ = upto; }

 private:
  size_t total_, cb_, chunks_, ring_;
  std::vector<bool> staged_;
  std::vector<size_t> pending_;  // blocks still to come per chunk
  size_t launched_ = 0;
};

}  // namespace vc
