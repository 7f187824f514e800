// `vericache bench attention`: what one drafting row pays per layer for attention
// over each compressor's view of a prompt's KV, against attention over the full KV
// (what full decoding pays), side by side at the model's head shape. The KV is
// random from a seed (one layer); the views are built by the real compressors and
// attended through the drafter's kernel (kvtiers/view_attention.hpp).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <numeric>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kernels/cpu/attention.hpp"
#include "kernels/cpu/cpu_features.hpp"
#include "kernels/cpu/thread_pool.hpp"
#include "kernels/dtype.hpp"
#include "kvtiers/compressed_tier.hpp"
#include "kvtiers/layer_compression.hpp"
#include "kvtiers/paged_kv_cache.hpp"
#include "kvtiers/view_attention.hpp"
#include "runtime/compression.hpp"
#include "runtime/model.hpp"
#include "tools/vericache/commands.hpp"
#include "tools/vericache/options.hpp"

namespace vc::cli {

namespace {

struct BenchAttentionArgs {
  std::string model_dir = default_model_dir();
  std::vector<size_t> contexts = {4096, 16384};
  std::vector<std::string> compressors = {"streaming_llm", "kivi", "kvquant", "rotate_kv"};
  double ratio = 4.0;
  int repeats = 5;
  int threads = 1;
  uint64_t seed = 1;
  size_t block_tokens = KvCacheConfig{}.block_tokens;  // the full row's paged block
  bool json = false;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Seconds per call of fn: calls in batches of at least ~20 ms, median of `repeats`.
template <class Fn>
double time_per_call(int repeats, Fn&& fn) {
  using clock = std::chrono::steady_clock;
  fn();  // warm: scratch, caches
  size_t calls = 1;
  for (;;) {
    const auto t0 = clock::now();
    for (size_t i = 0; i < calls; ++i) fn();
    const double s = std::chrono::duration<double>(clock::now() - t0).count();
    if (s >= 0.02 || calls >= (size_t(1) << 20)) break;
    calls *= 2;
  }
  std::vector<double> per;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = clock::now();
    for (size_t i = 0; i < calls; ++i) fn();
    per.push_back(std::chrono::duration<double>(clock::now() - t0).count() / double(calls));
  }
  return median(per);
}

// How the drafter reads a view's rows (KV head 0 of layer 0).
std::string read_as(const CompressedView& view) {
  if (const auto rows = view.rows_in_place(0, 0))
    return std::string(rows->dtype == DType::bf16 ? "bf16" : "fp32") + " rows in place";
  if (view.hadamard_basis(0, 0)) {
    const auto sides = view.quant_sides_rotated(0, 0);
    return sides.k && sides.v ? "from the codes, rotated" : "decoded, rotated";
  }
  const auto sides = view.quant_sides(0, 0);
  if (sides.k && sides.v) return "from the codes";
  if (sides.k || sides.v) return "one side from the codes";
  return "decoded per block";
}

int run_bench_attention(const BenchAttentionArgs& a) {
  // An unknown name is an error before anything runs (a view that cannot be built
  // at some context is a row's error below).
  for (const std::string& name : a.compressors) (void)make_compressor(name);
  auto model = Model::load(a.model_dir);
  const ModelConfig& c = model->config();
  const size_t nh = size_t(c.num_heads), G = size_t(c.num_kv_heads), D = size_t(c.head_dim);
  const float scale = 1.f / std::sqrt(float(D));
  std::unique_ptr<cpu::ThreadPool> pool;
  if (a.threads > 1) pool = std::make_unique<cpu::ThreadPool>(a.threads);
  nlohmann::json rows = nlohmann::json::array();
  for (size_t n : a.contexts) {
    // One layer of random KV (keys with a few large channels, as real keys have).
    std::mt19937_64 rng(a.seed + n);
    std::normal_distribution<float> normal(0.f, 1.f);
    KvSnapshot kv{1, G, D, n, std::vector<float>(G * n * D), std::vector<float>(G * n * D)};
    for (size_t i = 0; i < kv.k.size(); ++i) kv.k[i] = normal(rng) * (i % D % 16 == 3 ? 6.f : 1.f);
    for (float& x : kv.v) x = normal(rng);
    std::vector<float> q(nh * D);
    for (float& x : q) x = normal(rng);
    std::vector<float> out(nh * D);

    // The full KV as the paged cache holds it: bf16, [block][KV head][token][dim].
    const size_t bt = a.block_tokens;
    const size_t blocks = (n + bt - 1) / bt;
    std::vector<uint16_t> pk(blocks * G * bt * D, 0), pv(pk.size(), 0);
    for (size_t g = 0; g < G; ++g)
      for (size_t p = 0; p < n; ++p) {
        const size_t at = ((p / bt * G + g) * bt + p % bt) * D;
        for (size_t d = 0; d < D; ++d) {
          pk[at + d] = f32_to_bf16(kv.k[kv.index(0, g, p) + d]);
          pv[at + d] = f32_to_bf16(kv.v[kv.index(0, g, p) + d]);
        }
      }
    std::vector<int32_t> table(blocks);
    std::iota(table.begin(), table.end(), 0);
    const cpu::PagedKv full{pk.data(), pv.data(), DType::bf16, bt, G, D, table.data()};
    const double full_s = time_per_call(a.repeats, [&] {
      cpu::attention_row(q.data(), nh, full, n, scale, out.data(), pool.get());
    });
    const double full_mb = double(n * G * D * 2 * 2) / 1e6;
    rows.push_back({{"context", n}, {"view", "full"}, {"read_as", "bf16 paged"},
                    {"positions", n}, {"mb", full_mb}, {"us_per_row", full_s * 1e6},
                    {"vs_full", 1.0}, {"error", ""}});

    ModelFacts facts = model_facts(*model, n);
    facts.layers = 1;
    facts.wo.resize(std::min<size_t>(facts.wo.size(), 1));
    for (const std::string& name : a.compressors) {
      nlohmann::json row = {{"context", n}, {"view", name}, {"error", ""}};
      try {
        auto comp = make_compressor(name);
        const CompressedView view =
            CompressedView::build(kv, plan_snapshot(*comp, kv, {}, facts, a.ratio), *comp, facts);
        // The view covers every position: the tail is empty (n_ctx = covered()).
        const double s = time_per_call(a.repeats, [&] {
          attend_view_row(view, 0, q.data(), nh, full, n, scale, out.data(), pool.get());
        });
        size_t kept = 0;
        for (size_t g = 0; g < G; ++g) kept += view.count(0, g);
        row.update({{"read_as", read_as(view)},
                    {"positions", kept / G},
                    {"mb", double(view.held_bytes()) / 1e6},
                    {"us_per_row", s * 1e6},
                    {"vs_full", s / full_s}});
      } catch (const std::exception& e) {
        row.update({{"read_as", ""}, {"positions", 0}, {"mb", 0.0}, {"us_per_row", 0.0},
                    {"vs_full", 0.0}, {"error", e.what()}});
      }
      rows.push_back(row);
    }
  }
  const std::string simd(cpu::simd_path_name(cpu::active_simd_path()));
  if (a.json) {
    std::cout << nlohmann::json{{"model", a.model_dir}, {"heads", nh},     {"kv_heads", G},
                                {"head_dim", D},        {"ratio", a.ratio}, {"threads", a.threads},
                                {"repeats", a.repeats}, {"simd", simd},     {"block_tokens", a.block_tokens},
                                {"rows", rows}}
                     .dump(2)
              << "\n";
    return 0;
  }
  std::cout << fmt::format(
      "bench attention: one row, one layer ({} query heads over {} KV heads, head_dim {}: {}), "
      "views at {}x, random KV (seed {}), {} thread{}, SIMD {}, full KV in {}-token blocks, "
      "median of {}\n\n",
      nh, G, D, a.model_dir, a.ratio, a.seed, a.threads, a.threads == 1 ? "" : "s", simd,
      a.block_tokens, a.repeats);
  std::cout << fmt::format("{:>8}  {:<14} {:<24} {:>10} {:>9} {:>10} {:>8}\n", "context", "view",
                           "read as", "positions", "MB", "us/row", "vs full");
  for (const auto& r : rows) {
    if (!r["error"].get<std::string>().empty()) {
      std::cout << fmt::format("{:>8}  {:<14} error: {}\n", r["context"].get<size_t>(),
                               r["view"].get<std::string>(), r["error"].get<std::string>());
      continue;
    }
    std::cout << fmt::format("{:>8}  {:<14} {:<24} {:>10} {:>9.2f} {:>10.1f} {:>7.2f}x\n",
                             r["context"].get<size_t>(), r["view"].get<std::string>(),
                             r["read_as"].get<std::string>(), r["positions"].get<size_t>(),
                             r["mb"].get<double>(), r["us_per_row"].get<double>(),
                             r["vs_full"].get<double>());
  }
  std::cout << "\nfull: attention over every position's bf16 KV (full decoding's cost); a view: "
               "the drafter's attention over its kept rows (positions: per KV head)\n";
  return 0;
}

}  // namespace

void add_bench_attention_command(CLI::App& bench, Runner& run) {
  auto a = std::make_shared<BenchAttentionArgs>();
  CLI::App* cmd = bench.add_subcommand(
      "attention", "Drafter attention per row over each compressor's view vs the full KV");
  cmd->add_option("--model", a->model_dir, "Model directory (its head shape)")
      ->capture_default_str();
  cmd->add_option("--contexts", a->contexts, "Prompt lengths (positions of KV)")
      ->capture_default_str()->check(integer_in(1, 1 << 22));
  cmd->add_option("--compressor", a->compressors, "Compression methods (see `vericache compressors`)")
      ->capture_default_str();
  cmd->add_option("--ratio", a->ratio, "Compression ratio: full KV bytes / compressed bytes")
      ->capture_default_str()->check(number_in(1.0, 1024.0));
  cmd->add_option("--repeats", a->repeats, "Measurements per figure (median)")
      ->capture_default_str()->check(integer_in(1, 1000));
  cmd->add_option("--threads", a->threads, "Threads one row's KV heads are split across")
      ->capture_default_str()->check(integer_in(1, 1024));
  cmd->add_option("--seed", a->seed, "Seed of the random KV and query")->capture_default_str()->check(seed_value());
  cmd->add_option("--block-tokens", a->block_tokens,
                  "Positions per paged block of the full KV row (the softmax's block: the "
                  "paged cache's default)")
      ->capture_default_str()->check(integer_in(1, 4096));
  cmd->add_flag("--json", a->json, "Print JSON");
  cmd->callback([&run, a] { run = [a] { return run_bench_attention(*a); }; });
}

}  // namespace vc::cli
