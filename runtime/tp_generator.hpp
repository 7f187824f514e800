// Tensor-parallel generation on the CPU: one Generator per rank over the rank's
// shard of the model, the ranks running as threads in lock step.
#pragma once
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "runtime/generator.hpp"
#include "runtime/tp_comm.hpp"

namespace vc {

/// Runs every request on `degree` ranks (threads; rank 0 is the calling thread).
/// Each rank owns what a Generator owns for its shard: the KV of its KV heads in
/// every tier (paged cache, compressed view, full tier), its verifier and its
/// streamer, so each rank's mover reads only its own shard. The ranks take the same
/// decisions because every decision is made from gathered logits: the same tokens,
/// drafts, acceptances and stops on every rank (checked at the end). Methods that
/// rank tokens across heads see every rank's scores (HeadShards), so the
/// compression plan is the one of degree 1.
///
/// Output: at any degree, vericache equals full bit for bit (tokens and logprobs);
/// across degrees the all-reduce adds partial sums in another order, so logits
/// differ in the last bits (tests/runtime/tensor_parallel_test.cpp reports how much).
class TpGenerator {
 public:
  /// threads in cfg: per rank (0: the hardware's cores split between the ranks).
  /// cfg.fast_memory_bytes and cfg.full_tier_bytes are per rank. With
  /// cfg.remote_url each rank fetches and publishes its own shard's chunks (keys
  /// carry the rank and degree), in the full flow (compressed first is degree 1's),
  /// and the ranks prefill from the shortest prefix any of them fetched.
  TpGenerator(std::shared_ptr<const Model> model, std::shared_ptr<const Tokenizer> tokenizer,
              int degree, GeneratorConfig cfg = {});
  /// Ranks over `comm` (a CpuCommunicator, or an NcclCommunicator for GPU ranks).
  TpGenerator(std::shared_ptr<const Model> model, std::shared_ptr<const Tokenizer> tokenizer,
              std::shared_ptr<Communicator> comm, GeneratorConfig cfg = {});
  ~TpGenerator();

  /// As Generator::generate. Byte counts in the stats are summed over the ranks
  /// (each rank holds its shard); the rest are rank 0's. `on_token` runs on the
  /// calling thread, and its answer reaches every rank. Throws vc::Error for what
  /// tensor parallelism does not run yet (compressors that score hidden states) and for any rank's failure. With the adaptive draft length every
  /// rank's policy observes rank 0's timings, so the ranks draft the same lengths.
  [[nodiscard]] GenerateResult generate(std::span<const int32_t> prompt_ids,
                                        const GenerateOptions& opt,
                                        const TokenCallback& on_token = {});
  [[nodiscard]] GenerateResult generate(const std::string& prompt, const GenerateOptions& opt,
                                        const TokenCallback& on_token = {});

  [[nodiscard]] int degree() const { return int(ranks_.size()); }
  /// Rank r's shard of the model.
  [[nodiscard]] const Model& shard(int r) const { return ranks_.at(size_t(r))->model(); }

 private:
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::shared_ptr<Communicator> comm_;
  std::vector<std::unique_ptr<Generator>> ranks_;
};

}  // namespace vc
