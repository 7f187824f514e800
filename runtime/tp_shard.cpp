// Sharding a loaded model for tensor parallelism, as the reference engines (vLLM,
// Megatron) shard a Llama decoder: column-parallel q/k/v (by heads) and gate/up (by
// MLP columns) are contiguous row ranges of the checkpoint's matrices and point into
// its mapping; row-parallel o and down are column ranges, copied once; embedding
// and LM head keep a range of vocabulary rows.
#include <algorithm>
#include <cstring>

#include "kernels/error.hpp"
#include "kvtiers/head_shards.hpp"
#include "runtime/model.hpp"
#include "runtime/tp_comm.hpp"

namespace vc {

namespace {

// Rows [r0, r1) of a row-major matrix (or, for a vector, elements [r0, r1)).
Weight row_slice(const Weight& w, size_t r0, size_t r1) {
  if (!w.present()) return w;
  Weight s = w;
  const size_t es = dtype_size(w.dtype);
  if (w.rows == 1) {  // a bias vector: elements
    s.data = static_cast<const std::byte*>(w.data) + r0 * es;
    s.cols = r1 - r0;
    return s;
  }
  s.data = static_cast<const std::byte*>(w.data) + r0 * w.cols * es;
  s.rows = r1 - r0;
  return s;
}

// Columns [c0, c1) of a row-major matrix, copied into `store`.
Weight col_slice(const Weight& w, size_t c0, size_t c1, std::vector<std::vector<std::byte>>& store) {
  const size_t es = dtype_size(w.dtype), n = c1 - c0;
  std::vector<std::byte>& buf = store.emplace_back(w.rows * n * es);
  const auto* src = static_cast<const std::byte*>(w.data);
  for (size_t r = 0; r < w.rows; ++r)
    std::memcpy(buf.data() + r * n * es, src + (r * w.cols + c0) * es, n * es);
  Weight s = w;
  s.data = buf.data();
  s.cols = n;
  return s;
}

class CommHeadShards final : public HeadShards {
 public:
  CommHeadShards(std::shared_ptr<Communicator> comm, int rank, size_t kv_heads)
      : comm_(std::move(comm)), rank_(rank), kv_heads_(kv_heads) {}
  [[nodiscard]] size_t global_kv_heads() const override { return kv_heads_; }
  [[nodiscard]] size_t first_kv_head() const override {
    return shard_first_kv_head(size_t(rank_), size_t(comm_->degree()), kv_heads_);
  }
  [[nodiscard]] std::vector<float> gather(std::span<const float> local, size_t per_head) override {
    const size_t d = size_t(comm_->degree());
    std::vector<float> all(d * local.size());
    comm_->all_gather(rank_, local.data(), local.size(), all.data());
    std::vector<float> out;
    out.reserve(kv_heads_ * per_head);
    for (size_t r = 0; r < d; ++r) {  // a replica repeats the previous rank's head
      if (r > 0 && shard_first_kv_head(r, d, kv_heads_) == shard_first_kv_head(r - 1, d, kv_heads_)) continue;
      out.insert(out.end(), all.begin() + long(r * local.size()), all.begin() + long((r + 1) * local.size()));
    }
    if (out.size() != kv_heads_ * per_head)
      throw Error("tensor parallelism: gathered " + std::to_string(out.size()) + " values for " +
                  std::to_string(kv_heads_) + " KV heads of " + std::to_string(per_head));
    return out;
  }

 private:
  std::shared_ptr<Communicator> comm_;
  int rank_;
  size_t kv_heads_;
};

}  // namespace

size_t shard_first_kv_head(size_t rank, size_t degree, size_t kv_heads) {
  return kv_heads >= degree ? rank * (kv_heads / degree) : rank * kv_heads / degree;
}

std::shared_ptr<const Model> Model::shard(std::shared_ptr<const Model> base, int rank,
                                          std::shared_ptr<Communicator> comm) {
  if (!base || !comm) throw Error("Model::shard: no model or no communicator");
  if (base->tp() != nullptr) throw Error("Model::shard: the model is already a shard");
  if (!base->device().is_cpu())
    throw Error("Model::shard: the model is on " + base->device().str() +
                "; tensor-parallel shards run on the CPU only (for now)");
  const int degree = comm->degree();
  if (rank < 0 || rank >= degree)
    throw Error("Model::shard: rank " + std::to_string(rank) + " of a group of " + std::to_string(degree));
  const ModelConfig& c = base->config();
  const size_t d = size_t(degree), nh = size_t(c.num_heads), nkv = size_t(c.num_kv_heads);
  const size_t I = size_t(c.intermediate_size), hd = size_t(c.head_dim), V = size_t(c.vocab_size);
  auto need = [&](bool ok, const std::string& what) {
    if (!ok)
      throw Error("tensor parallelism: degree " + std::to_string(degree) + " does not split " + what);
  };
  need(nh % d == 0, "the model's " + std::to_string(nh) + " attention heads");
  need(nkv % d == 0 || d % nkv == 0,
       "the model's " + std::to_string(nkv) + " KV heads (nor is it a multiple of them)");
  need(I % d == 0, "the model's MLP width " + std::to_string(I));

  const size_t r = size_t(rank);
  TensorParallelRank tp;
  tp.comm = comm;
  tp.rank = rank;
  tp.degree = degree;
  tp.vocab_slice = (V + d - 1) / d;
  tp.vocab_begin = std::min(V, r * tp.vocab_slice);
  tp.vocab_end = std::min(V, tp.vocab_begin + tp.vocab_slice);
  tp.global_heads = nh;
  tp.global_kv_heads = nkv;
  tp.global_intermediate = I;
  tp.first_head = r * (nh / d);
  tp.first_kv_head = shard_first_kv_head(r, d, nkv);
  tp.head_shards = std::make_shared<CommHeadShards>(comm, rank, nkv);
  tp.unsharded = base.get();
  const size_t heads = nh / d, kv_heads = std::max<size_t>(1, nkv / d), inter = I / d;

  ModelConfig sc = c;
  sc.num_heads = int(heads);
  sc.num_kv_heads = int(kv_heads);
  sc.intermediate_size = int(inter);

  std::vector<std::vector<std::byte>> owned;
  const ModelWeights& W = base->weights();
  ModelWeights sw = W;  // shares the checkpoint's mapping
  sw.embed = row_slice(W.embed, tp.vocab_begin, tp.vocab_end);
  sw.lm_head = row_slice(W.lm_head, tp.vocab_begin, tp.vocab_end);
  const size_t q0 = tp.first_head * hd, q1 = q0 + heads * hd;
  const size_t k0 = tp.first_kv_head * hd, k1 = k0 + kv_heads * hd;
  const size_t i0 = r * inter, i1 = i0 + inter;
  for (LayerWeights& L : sw.layers) {
    L.wq = row_slice(L.wq, q0, q1);
    L.bq = row_slice(L.bq, q0, q1);
    L.wk = row_slice(L.wk, k0, k1);
    L.bk = row_slice(L.bk, k0, k1);
    L.wv = row_slice(L.wv, k0, k1);
    L.bv = row_slice(L.bv, k0, k1);
    L.wo = col_slice(L.wo, q0, q1, owned);
    L.w_gate = row_slice(L.w_gate, i0, i1);
    L.w_up = row_slice(L.w_up, i0, i1);
    L.w_down = col_slice(L.w_down, i0, i1, owned);
  }
  std::shared_ptr<Model> m(new Model(base->dir(), std::move(sc), std::move(sw)));
  m->base_ = std::move(base);
  m->owned_ = std::move(owned);
  m->tp_ = std::move(tp);
  return m;
}

std::shared_ptr<const Model> Model::with_comm(std::shared_ptr<const Model> shard,
                                              std::shared_ptr<Communicator> comm) {
  if (!shard || !comm) throw Error("Model::with_comm: no model or no communicator");
  const TensorParallelRank* t = shard->tp();
  if (t == nullptr) throw Error("Model::with_comm: the model is not a shard (Model::shard makes one)");
  if (comm->degree() != t->degree)
    throw Error("Model::with_comm: a communicator of " + std::to_string(comm->degree()) +
                " ranks for a shard of a group of " + std::to_string(t->degree));
  TensorParallelRank tp = *t;
  tp.comm = comm;
  tp.head_shards = std::make_shared<CommHeadShards>(comm, tp.rank, tp.global_kv_heads);
  std::shared_ptr<Model> m(new Model(shard->dir(), shard->config(), shard->weights()));
  m->base_ = std::move(shard);  // owns the columns the weights point into
  m->tp_ = std::move(tp);
  return m;
}

}  // namespace vc
