// The ranks of CPU tensor parallelism run as threads, each a Generator over its
// shard; a failing rank aborts the group so no rank waits forever.
#include "runtime/tp_generator.hpp"

#include "kernels/error.hpp"
#include "kvtiers/compressor.hpp"
#include "kvtiers/remote/back_fetch_board.hpp"
#include "runtime/rank_group.hpp"

namespace vc {

TpGenerator::TpGenerator(std::shared_ptr<const Model> model,
                         std::shared_ptr<const Tokenizer> tokenizer, int degree,
                         GeneratorConfig cfg)
    : TpGenerator(std::move(model), std::move(tokenizer), std::make_shared<CpuCommunicator>(degree),
                  std::move(cfg)) {}

TpGenerator::TpGenerator(std::shared_ptr<const Model> model,
                         std::shared_ptr<const Tokenizer> tokenizer,
                         std::shared_ptr<Communicator> comm, GeneratorConfig cfg)
    : tokenizer_(std::move(tokenizer)), comm_(std::move(comm)) {
  if (!comm_) throw Error("tensor parallelism: no communicator");
  const int degree = comm_->degree();
  if (cfg.threads <= 0) cfg.threads = std::max(1, default_thread_count() / degree);
  for (int r = 0; r < degree; ++r)
    ranks_.push_back(
        std::make_unique<Generator>(Model::shard(model, r, comm_), tokenizer_, cfg));
  // Each rank runs its own back fetch; once one's run ends, the others stop below it.
  if (!cfg.remote_url.empty() && degree > 1) {
    const auto board = std::make_shared<BackFetchBoard>(size_t(degree));
    for (int r = 0; r < degree; ++r) ranks_[size_t(r)]->share_back_fetches(board, size_t(r));
  }
}

TpGenerator::~TpGenerator() = default;

GenerateResult TpGenerator::generate(const std::string& prompt, const GenerateOptions& opt,
                                     const TokenCallback& on_token) {
  if (!tokenizer_) throw Error("generate: a text prompt needs a tokenizer");
  const std::vector<int32_t> ids = tokenizer_->encode(prompt);
  return generate(ids, opt, on_token);
}

GenerateResult TpGenerator::generate(std::span<const int32_t> prompt_ids,
                                     const GenerateOptions& opt, const TokenCallback& on_token) {
  const int d = degree();
  std::vector<GenerateResult> results(static_cast<size_t>(d));
  // The stop decision is rank 0's callback's, shared by an all-reduce so that every
  // rank stops on the same token.
  auto callback_of = [&](int r) -> TokenCallback {
    if (!on_token || d == 1) return on_token;
    return [&, r](int32_t tok) {
      float stop = r == 0 && !on_token(tok) ? 1.0f : 0.0f;
      comm_->all_reduce_sum(r, &stop, 1);
      return stop == 0.0f;
    };
  };
  // Every rank at once; a failing rank aborts the group, which is reset once every
  // rank has returned, and its own error (the cause) is rethrown.
  RankGroup(comm_).run([&](int r) {
    results[size_t(r)] = ranks_[size_t(r)]->generate(prompt_ids, opt, callback_of(r));
  });

  GenerateResult out = std::move(results[0]);
  for (int r = 1; r < d; ++r) {
    const GenerateResult& o = results[size_t(r)];
    if (o.output_ids != out.output_ids || o.output_logprobs != out.output_logprobs)
      throw Error("tensor parallelism: rank " + std::to_string(r) + " generated other tokens than rank 0");
    GenerateStats& s = out.stats;
    const GenerateStats& t = o.stats;
    s.kv_bytes += t.kv_bytes;
    s.compressed_bytes += t.compressed_bytes;
    s.compressed_full_bytes += t.compressed_full_bytes;
    s.full_tier_bytes_read += t.full_tier_bytes_read;
    s.full_tier_bytes_read_refold += t.full_tier_bytes_read_refold;
    s.full_tier_bytes_written += t.full_tier_bytes_written;
    s.compressed_bytes_read += t.compressed_bytes_read;
    s.fast_bytes_end += t.fast_bytes_end;
    s.fast_bytes_peak += t.fast_bytes_peak;
    s.fast_kv_bytes_peak += t.fast_kv_bytes_peak;
    s.remote_bytes_full += t.remote_bytes_full;  // each rank fetched its own shard's chunks
  }
  return out;
}

}  // namespace vc
