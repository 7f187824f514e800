// CPU tensor parallelism (runtime/tp_comm, tp_shard, tp_generator): the
// communicator's collectives, the shards' shapes, and the exactness contract at
// degrees 1, 2 and 4 on the bundled model (4 query heads, 2 KV heads: at degree 4
// every KV head is held by two ranks).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <thread>

#include "kernels/error.hpp"
#include "kvtiers/layer_compression.hpp"
#include "runtime/compression.hpp"
#include "runtime/tp_generator.hpp"
#include "tests/error_naming.hpp"
#include "tests/runtime/exactness_check.hpp"
#include "tests/runtime/test_support.hpp"
#include "tests/kernels/kernel_test_util.hpp"

namespace vc {
namespace {

// Runs f(rank) on `degree` threads.
template <class F>
void on_ranks(int degree, F f) {
  std::vector<std::thread> ts;
  for (int r = 0; r < degree; ++r) ts.emplace_back(f, r);
  for (auto& t : ts) t.join();
}

TEST(cpu_communicator, all_reduce_adds_in_rank_order_and_every_rank_gets_the_same_bits) {
  // Float addition is not associative: (1e8 + 1) - 1e8 is 0, 1e8 + (1 - 1e8) is 1.
  CpuCommunicator comm(3);
  const float parts[3][2] = {{1e8f, 0.5f}, {1.0f, 0.25f}, {-1e8f, 0.125f}};
  float out[3][2];
  on_ranks(3, [&](int r) {
    out[r][0] = parts[r][0];
    out[r][1] = parts[r][1];
    for (int round = 0; round < 50; ++round) {  // reuse across rounds stays correct
      out[r][0] = parts[r][0];
      out[r][1] = parts[r][1];
      comm.all_reduce_sum(r, out[r], 2);
    }
  });
  const float want0 = (parts[0][0] + parts[1][0]) + parts[2][0];
  EXPECT_EQ(want0, 0.0f);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(out[r][0], want0) << "rank " << r;
    EXPECT_EQ(out[r][1], 0.875f) << "rank " << r;
  }
}

TEST(cpu_communicator, all_gather_places_each_rank_in_rank_order) {
  CpuCommunicator comm(4);
  std::vector<std::vector<float>> got(4, std::vector<float>(8));
  on_ranks(4, [&](int r) {
    const float mine[2] = {float(r), float(10 * r)};
    comm.all_gather(r, mine, 2, got[size_t(r)].data());
  });
  for (int r = 0; r < 4; ++r)
    EXPECT_EQ(got[size_t(r)], (std::vector<float>{0, 0, 1, 10, 2, 20, 3, 30}));
}

TEST(cpu_communicator, a_failing_rank_releases_the_others_with_its_error) {
  CpuCommunicator comm(3);
  std::vector<std::string> errors(3);
  on_ranks(3, [&](int r) {
    if (r == 1) {
      comm.abort(1, "disk full");
      return;
    }
    float x = 1;
    try {
      comm.all_reduce_sum(r, &x, 1);
    } catch (const Error& e) {
      errors[size_t(r)] = e.what();
    }
  });
  EXPECT_EQ(comm.aborted_by(), 1);
  for (int r : {0, 2}) EXPECT_NE(errors[size_t(r)].find("rank 1 failed: disk full"), std::string::npos) << errors[size_t(r)];
}

TEST(model_shard, splits_heads_mlp_and_vocabulary_and_replicates_kv_heads_when_fewer_than_ranks) {
  const auto base = test::tinycode();
  const ModelConfig& c = base->config();
  ASSERT_EQ(c.num_heads, 4);
  ASSERT_EQ(c.num_kv_heads, 2);
  for (int d : {2, 4}) {
    auto comm = std::make_shared<CpuCommunicator>(d);
    size_t vocab_rows = 0;
    for (int r = 0; r < d; ++r) {
      const auto s = Model::shard(base, r, comm);
      const TensorParallelRank& tp = *s->tp();
      EXPECT_EQ(s->config().num_heads, 4 / d);
      EXPECT_EQ(s->config().num_kv_heads, 1);
      EXPECT_EQ(s->config().intermediate_size, c.intermediate_size / d);
      EXPECT_EQ(s->config().vocab_size, c.vocab_size);
      // Degree 2: KV head r; degree 4: ranks 0,1 hold head 0 and ranks 2,3 head 1.
      EXPECT_EQ(tp.first_kv_head, d == 2 ? size_t(r) : size_t(r / 2)) << "degree " << d << " rank " << r;
      EXPECT_EQ(tp.first_head, size_t(r * 4 / d));
      const LayerWeights& L = s->weights().layers[0];
      EXPECT_EQ(L.wq.rows, size_t(4 / d * c.head_dim));
      EXPECT_EQ(L.wo.cols, size_t(4 / d * c.head_dim));
      EXPECT_EQ(L.w_down.cols, size_t(c.intermediate_size / d));
      // The shard's o_proj columns are the model's.
      const auto* full = static_cast<const uint16_t*>(base->weights().layers[0].wo.data);
      const auto* part = static_cast<const uint16_t*>(L.wo.data);
      EXPECT_EQ(part[1], full[tp.first_head * size_t(c.head_dim) + 1]);
      vocab_rows += s->weights().embed.rows;
    }
    EXPECT_EQ(vocab_rows, size_t(c.vocab_size));
  }
  test::expect_error_naming([&] { (void)Model::shard(base, 0, std::make_shared<CpuCommunicator>(3)); },
                            "degree 3 does not split the model's 4 attention heads");
}

TEST(model_shard, with_comm_shares_the_shards_weights_and_errors_name_what_does_not_fit) {
  const auto base = test::tinycode();
  auto a = std::make_shared<CpuCommunicator>(2), b = std::make_shared<CpuCommunicator>(2);
  const auto s = Model::shard(base, 1, a);
  const auto t = Model::with_comm(s, b);
  ASSERT_NE(t->tp(), nullptr);
  EXPECT_EQ(t->tp()->comm, b);
  EXPECT_EQ(t->tp()->rank, 1);
  EXPECT_EQ(t->tp()->first_head, s->tp()->first_head);
  EXPECT_NE(t->tp()->head_shards, s->tp()->head_shards) << "its own group's view of the KV heads";
  EXPECT_EQ(t->config().num_heads, s->config().num_heads);
  for (size_t l = 0; l < s->weights().layers.size(); ++l) {
    const LayerWeights &x = s->weights().layers[l], &y = t->weights().layers[l];
    // The copied columns are the shard's own buffers, held once.
    EXPECT_EQ(y.wo.data, x.wo.data) << "layer " << l;
    EXPECT_EQ(y.w_down.data, x.w_down.data) << "layer " << l;
    EXPECT_EQ(y.wq.data, x.wq.data) << "layer " << l;
  }
  EXPECT_EQ(t->weights().embed.data, s->weights().embed.data);
  test::expect_error_naming([&] { (void)Model::with_comm(base, b); }, "not a shard");
  test::expect_error_naming([&] { (void)Model::with_comm(s, std::make_shared<CpuCommunicator>(4)); },
                            "a communicator of 4 ranks for a shard of a group of 2");
  test::expect_error_naming([&] { (void)Model::with_comm(s, nullptr); }, "no communicator");
}

TEST(model_shard, two_groups_over_one_set_of_shards_run_at_once_and_decode_the_same_bits) {
  // The engine's drafter and verifier groups: rank r's verifier shard is its drafter
  // shard over another communicator, and both groups run passes at the same time.
  const auto base = test::tinycode();
  constexpr int d = 2;
  auto a = std::make_shared<CpuCommunicator>(d), b = std::make_shared<CpuCommunicator>(d);
  GeneratorConfig gc;
  gc.max_context = 256;
  gc.threads = 1;
  std::vector<std::shared_ptr<const Model>> shards;  // group a's ranks, then group b's
  for (int r = 0; r < d; ++r) shards.push_back(Model::shard(base, r, a));
  for (int r = 0; r < d; ++r) shards.push_back(Model::with_comm(shards[size_t(r)], b));
  std::vector<std::unique_ptr<Generator>> gens;
  for (const auto& s : shards)
    gens.push_back(std::make_unique<Generator>(s, test::tinycode_tokenizer(), gc));
  std::mt19937 rng(17);
  const auto p = test::random_tokens(rng, 60, base->config().vocab_size, base->config().bos_token_id);
  GenerateOptions o;
  o.max_tokens = 16;
  o.stop_at_eos = false;
  std::vector<GenerateResult> out(gens.size());
  on_ranks(int(gens.size()), [&](int i) { out[size_t(i)] = gens[size_t(i)]->generate(p, o); });
  for (size_t i = 1; i < out.size(); ++i) {
    EXPECT_EQ(out[i].output_ids, out[0].output_ids) << "rank " << i % d << " of group " << i / d;
    EXPECT_EQ(0, std::memcmp(out[i].output_logprobs.data(), out[0].output_logprobs.data(),
                             out[0].output_logprobs.size() * sizeof(float)));
  }
}

GenerateOptions options(DecodeMode mode, int tokens, bool sampled = false) {
  GenerateOptions o;
  o.mode = mode;
  o.max_tokens = tokens;
  o.stop_at_eos = false;
  if (sampled) o.sampling = SamplingParams{0.9f, 50, 0.95f, 1234};
  return o;
}

GeneratorConfig config() {
  GeneratorConfig gc;
  gc.max_context = 1024;
  return gc;
}

std::vector<int32_t> prompt(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  const ModelConfig& c = test::tinycode()->config();
  return test::random_tokens(rng, n, c.vocab_size, c.bos_token_id);
}

using test::expect_identical;

TEST(tensor_parallel, degree_one_equals_the_unsharded_generator_bit_for_bit) {
  Generator plain(test::tinycode(), test::tinycode_tokenizer(), config());
  TpGenerator tp(test::tinycode(), test::tinycode_tokenizer(), 1, config());
  const auto p = prompt(90, 5);
  GenerateOptions o = options(DecodeMode::full, 24);
  o.keep_logits = true;
  const auto a = plain.generate(p, o), b = tp.generate(p, o);
  expect_identical(a, b, "degree 1");
  ASSERT_EQ(a.step_logits.size(), b.step_logits.size());
  EXPECT_EQ(0, std::memcmp(a.step_logits.data(), b.step_logits.data(), a.step_logits.size() * sizeof(float)));
}

TEST(tensor_parallel, vericache_equals_full_bit_for_bit_at_degrees_1_2_and_4) {
  const std::vector<std::string> methods = {"snapkv", "streaming_llm", "laprox", "kivi", "snapkv+kivi"};
  for (int d : {1, 2, 4}) {
    TpGenerator tp(test::tinycode(), test::tinycode_tokenizer(), d, config());
    for (bool sampled : {false, true}) {
      const auto p = prompt(150, 11);
      const auto full = tp.generate(p, options(DecodeMode::full, 32, sampled));
      for (const auto& m : methods)
        for (size_t draft : {size_t(1), size_t(6), size_t(16)}) {
          GenerateOptions o = options(DecodeMode::vericache, 32, sampled);
          o.compressor = m;
          o.draft_length = draft;
          o.fold_every = 8;  // the view is rebuilt (through the gathered plan) during the run
          const auto r = tp.generate(p, o);
          expect_identical(full, r, "degree " + std::to_string(d) + " " + m + " draft " +
                                        std::to_string(draft) + (sampled ? " sampled" : " greedy"));
          EXPECT_GT(r.stats.rounds, 0u);
        }
    }
  }
}

// Teacher-forced logits of `d` ranks over one continuation.
std::vector<float> forced_logits(int d, DType kv, const std::vector<int32_t>& p,
                                 const std::vector<int32_t>& forced) {
  GeneratorConfig gc = config();
  gc.kv_dtype = kv;
  TpGenerator tp(test::tinycode(), test::tinycode_tokenizer(), d, gc);
  GenerateOptions o = options(DecodeMode::full, 0);
  o.forced_output = forced;
  o.keep_logits = true;
  return tp.generate(p, o).step_logits;
}

TEST(tensor_parallel, degrees_2_and_4_agree_with_degree_1_within_the_golden_tolerance) {
  // The all-reduce adds the ranks' partial sums of o_proj and down_proj, an order
  // degree 1 does not use: the logits move in the last bits, never more than the
  // golden test allows against the float64 reference (tests/runtime/golden_test.cpp)
  // on a path that keeps activations in f32.
  test::F32PathScope f32;
  const auto p = prompt(120, 3);
  const std::vector<int32_t> cont = prompt(30, 4);
  const std::vector<int32_t> forced(cont.begin() + 1, cont.end());
  for (const auto& [kv, tol] : {std::pair{DType::f32, 1e-4f}, std::pair{DType::bf16, 2e-2f}}) {
    const auto one = forced_logits(1, kv, p, forced);
    for (int d : {2, 4}) {
      const auto other = forced_logits(d, kv, p, forced);
      ASSERT_EQ(one.size(), other.size());
      float worst = 0;
      for (size_t i = 0; i < one.size(); ++i) worst = std::max(worst, std::fabs(one[i] - other[i]));
      std::printf("  degree %d vs 1, %s KV: largest logit difference %.3e over %zu steps (tolerance %.0e)\n",
                  d, std::string(dtype_name(kv)).c_str(), double(worst), forced.size(), double(tol));
      EXPECT_LE(worst, tol) << "degree " << d;
    }
  }
}

TEST(tensor_parallel, the_compression_plan_does_not_depend_on_the_degree) {
  // LaProx ranks tokens across every head of the model and the quantizer sizes its
  // storage from every head's rows: the ranks' views together are degree 1's view.
  const auto p = prompt(200, 8);
  for (const std::string m : {"laprox", "snapkv+kivi", "h2o"}) {
    GenerateOptions o = options(DecodeMode::lossy, 1);
    o.compressor = m;
    TpGenerator one(test::tinycode(), test::tinycode_tokenizer(), 1, config());
    TpGenerator two(test::tinycode(), test::tinycode_tokenizer(), 2, config());
    const auto a = one.generate(p, o), b = two.generate(p, o);
    EXPECT_EQ(a.stats.compressed_bytes, b.stats.compressed_bytes) << m;
    EXPECT_EQ(a.stats.compressed_full_bytes, b.stats.compressed_full_bytes) << m;
    EXPECT_GT(a.stats.compressed_full_bytes, a.stats.compressed_bytes) << m;
  }
}

// Random KV and window statistics of the bundled model's shape, planned by each rank
// of a degree-d group from its own KV heads.
struct PlanCase {
  KvSnapshot kv;
  size_t window = 8;
  std::vector<float> attention;  // [layers][kv_heads][window][n_pos]
  size_t group = 0;

  PlanCase(const ModelConfig& c, size_t n, unsigned seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd;
    std::uniform_real_distribution<float> ud(0, 1);
    kv.layers = size_t(c.num_layers), kv.kv_heads = size_t(c.num_kv_heads);
    kv.head_dim = size_t(c.head_dim), kv.n_pos = n;
    kv.k.resize(kv.layers * kv.kv_heads * n * kv.head_dim);
    kv.v.resize(kv.k.size());
    for (auto& x : kv.k) x = nd(rng);
    for (auto& x : kv.v) x = nd(rng);
    attention.resize(kv.layers * kv.kv_heads * window * n);
    for (auto& x : attention) x = ud(rng);
    group = size_t(c.num_heads / c.num_kv_heads);
  }
  // KV heads [first, first + count) as a snapshot of their own.
  [[nodiscard]] KvSnapshot heads(size_t first, size_t count) const {
    KvSnapshot s = kv;
    s.kv_heads = count;
    s.k.clear(), s.v.clear();
    for (size_t l = 0; l < kv.layers; ++l)
      for (size_t g = first; g < first + count; ++g) {
        s.k.insert(s.k.end(), kv.k.begin() + long(kv.index(l, g, 0)), kv.k.begin() + long(kv.index(l, g + 1, 0)));
        s.v.insert(s.v.end(), kv.v.begin() + long(kv.index(l, g, 0)), kv.v.begin() + long(kv.index(l, g + 1, 0)));
      }
    return s;
  }
  // The statistics of a slice (its heads' absolute indices: a rank plans its heads
  // as a slice of the model's).
  [[nodiscard]] LayerStatsSource stats() const {
    return [this](const LayerKv& s) {
      LayerStats st;
      st.kv_heads = s.kv_heads, st.heads = s.kv_heads * group, st.head_dim = s.head_dim;
      st.n_pos = s.n_pos, st.window = window;
      for (size_t g = 0; g < s.kv_heads; ++g) {
        const size_t at = ((s.layer * kv.kv_heads + s.first_head + g) * window) * kv.n_pos;
        st.window_attention.insert(st.window_attention.end(), attention.begin() + long(at),
                                   attention.begin() + long(at + window * kv.n_pos));
      }
      return st;
    };
  }
};

// The plans of a degree-d group's ranks joined in head order (each head once).
CompressionPlan joined_plan(const std::string& method, const PlanCase& pc, int d, bool share) {
  const auto base = test::tinycode();
  auto comm = std::make_shared<CpuCommunicator>(d);
  std::vector<std::shared_ptr<const Model>> shards;
  for (int r = 0; r < d; ++r) shards.push_back(Model::shard(base, r, comm));
  std::vector<CompressionPlan> plans(static_cast<size_t>(d));
  on_ranks(d, [&](int r) {
    const Model& m = *shards[size_t(r)];
    const size_t first = m.tp()->first_kv_head, count = size_t(m.config().num_kv_heads);
    ModelFacts facts = model_facts(m, pc.kv.n_pos);
    if (!share) facts.shards = nullptr;
    const auto c = make_compressor(method);
    plans[size_t(r)] = plan_snapshot(*c, pc.heads(first, count), pc.stats(), facts, 4.0);
  });
  CompressionPlan out = plans[0];
  for (int r = 1; r < d; ++r) {
    if (shards[size_t(r)]->tp()->first_kv_head == shards[size_t(r - 1)]->tp()->first_kv_head) continue;
    for (size_t l = 0; l < out.keep.size(); ++l)
      for (auto& head : plans[size_t(r)].keep[l]) out.keep[l].push_back(head);
    EXPECT_EQ(plans[size_t(r)].quant.key_bits, out.quant.key_bits);
  }
  return out;
}

TEST(tensor_parallel, the_ranks_plans_join_into_the_degree_one_plan) {
  // LaProx ranks tokens across every head of the model and the quantizers size their
  // storage from every head's rows: each rank sees the others' through HeadShards.
  const auto base = test::tinycode();
  const PlanCase pc(base->config(), 96, 21);
  for (const std::string m : {"laprox", "laprox+kivi", "snapkv+kivi", "kivi"}) {
    const auto c = make_compressor(m);
    const CompressionPlan one =
        plan_snapshot(*c, pc.kv, pc.stats(), model_facts(*base, pc.kv.n_pos), 4.0);
    for (int d : {2, 4}) {
      const CompressionPlan joined = joined_plan(m, pc, d, true);
      EXPECT_EQ(joined.keep, one.keep) << m << " at degree " << d;
      EXPECT_EQ(joined.quant.key_bits, one.quant.key_bits) << m;
      EXPECT_EQ(joined.quant.value_bits, one.quant.value_bits) << m;
    }
  }
  // Without the exchange each rank would rank its own head alone: another plan.
  const CompressionPlan one = plan_snapshot(*make_compressor("laprox"), pc.kv, pc.stats(),
                                            model_facts(*base, pc.kv.n_pos), 4.0);
  EXPECT_NE(joined_plan("laprox", pc, 2, false).keep, one.keep);
}

TEST(tensor_parallel, a_callback_that_stops_stops_every_rank_on_the_same_token) {
  TpGenerator tp(test::tinycode(), test::tinycode_tokenizer(), 2, config());
  GenerateOptions o = options(DecodeMode::vericache, 40);
  o.draft_length = 8;
  int seen = 0;
  const auto r = tp.generate(prompt(60, 2), o, [&](int32_t) { return ++seen < 5; });
  EXPECT_EQ(seen, 5);
  EXPECT_EQ(r.output_ids.size(), 5u);
  // The group is still in step: a second request runs.
  EXPECT_EQ(tp.generate(prompt(60, 2), options(DecodeMode::full, 5)).output_ids, r.output_ids);
}

TEST(tensor_parallel, the_adaptive_draft_length_at_degree_two_equals_full_decoding_bit_for_bit) {
  // Each rank times its own passes; the ranks must still draft the same lengths, or
  // their verify passes would meet in collectives of different sizes.
  TpGenerator tp(test::tinycode(), test::tinycode_tokenizer(), 2, config());
  for (const bool sampled : {false, true}) {
    for (const char* method : {"snapkv", "kivi"}) {
      const std::string what = std::string(method) + (sampled ? " sampled" : " greedy");
      GenerateOptions o = options(DecodeMode::vericache, 48, sampled);
      o.compressor = method;
      o.draft_auto = true;
      o.max_draft = 12;
      const GenerateResult v = tp.generate(prompt(90, 3), o);
      const GenerateResult f = tp.generate(prompt(90, 3), options(DecodeMode::full, 48, sampled));
      expect_identical(v, f, what);
      EXPECT_GT(v.stats.rounds, 1u) << what;
      EXPECT_EQ(v.stats.accepted_histogram.size(), 13u) << what;
    }
  }
  // With a measured row-cost curve too.
  GenerateOptions o = options(DecodeMode::vericache, 32);
  o.draft_auto = true;
  o.row_costs = {{1, 1e-3}, {8, 2e-3}, {64, 1e-2}};
  expect_identical(tp.generate(prompt(70, 4), o), tp.generate(prompt(70, 4), options(DecodeMode::full, 32)),
                   "row costs");
}

TEST(tensor_parallel, kvzap_vericache_equals_full_bit_for_bit_at_degrees_2_and_4) {
  // Every rank scores the whole hidden states (the same bits on every rank) with the
  // whole surrogate; each plans its KV heads from the model-wide scores, in the
  // prefill and, as tokens are verified, in every fold.
  for (int d : {2, 4}) {
    TpGenerator tp(test::tinycode(), test::tinycode_tokenizer(), d, config());
    for (bool sampled : {false, true}) {
      const auto p = prompt(150, 12);
      const auto full = tp.generate(p, options(DecodeMode::full, 32, sampled));
      for (size_t draft : {size_t(1), size_t(6)}) {
        GenerateOptions o = options(DecodeMode::vericache, 32, sampled);
        o.compressor = "kvzap";
        o.draft_length = draft;
        o.fold_every = 8;
        const auto r = tp.generate(p, o);
        expect_identical(full, r, "degree " + std::to_string(d) + " kvzap draft " + std::to_string(draft) +
                                      (sampled ? " sampled" : " greedy"));
        EXPECT_GT(r.stats.rounds, 0u);
        EXPECT_LT(r.stats.compressed_bytes, r.stats.compressed_full_bytes);
      }
    }
  }
  // A ratio keeps as many positions at every degree.
  GenerateOptions lossy = options(DecodeMode::lossy, 1);
  lossy.compressor = "kvzap";
  TpGenerator one(test::tinycode(), test::tinycode_tokenizer(), 1, config());
  TpGenerator two(test::tinycode(), test::tinycode_tokenizer(), 2, config());
  EXPECT_EQ(one.generate(prompt(200, 8), lossy).stats.compressed_bytes,
            two.generate(prompt(200, 8), lossy).stats.compressed_bytes);
}

TEST(tensor_parallel, a_bad_request_fails_with_its_own_error_and_the_group_stays_usable) {
  TpGenerator tp(test::tinycode(), test::tinycode_tokenizer(), 2, config());
  test::expect_error_naming(
      [&] { (void)tp.generate(std::vector<int32_t>{}, options(DecodeMode::full, 4)); },
      "generate: the prompt has no tokens");
  GenerateOptions o = options(DecodeMode::vericache, 4);
  o.compressor = "nonsense";
  test::expect_error_naming([&] { (void)tp.generate(prompt(20, 1), o); }, "nonsense");
  // The group is still usable.
  EXPECT_EQ(tp.generate(prompt(20, 1), options(DecodeMode::full, 3)).output_ids.size(), 3u);
}

}  // namespace
}  // namespace vc
