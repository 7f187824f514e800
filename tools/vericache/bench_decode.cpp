// `vericache bench decode`: prefill and decode speed of full-KV decoding at several
// context lengths, with bytes read per decoded token against the memory bandwidth
// measured in the same run.
#include <algorithm>
#include <chrono>
#include <iostream>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "kernels/cpu/cpu_features.hpp"
#include "kernels/error.hpp"
#include "runtime/device.hpp"
#include "runtime/forward.hpp"
#include "runtime/linear_backend.hpp"
#include "runtime/sampler.hpp"
#include "tools/vericache/commands.hpp"
#include "tools/vericache/options.hpp"
#include "tools/vericache/membw.hpp"

namespace vc::cli {

namespace {

struct BenchDecodeArgs {
  std::string model_dir = default_model_dir();
  std::vector<size_t> contexts = {0, 4096, 16384};
  std::vector<int> threads = {1, 2};
  size_t prefill_tokens = 512;
  size_t decode_tokens = 128;
  int repeats = 3;
  std::string kv_dtype = "bf16";
  std::string device = "cpu";
  bool json = false;
};

using clock_type = std::chrono::steady_clock;

double since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::vector<int32_t> random_prompt(size_t n, int vocab, int bos) {
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int> d(0, std::max(0, vocab - 3));
  std::vector<int32_t> ids(n);
  for (auto& t : ids) t = d(rng);
  if (!ids.empty() && bos >= 0) ids[0] = bos;
  return ids;
}

// Greedy decode of `steps` tokens after `seq`'s current content; returns seconds.
double time_decode(const Model& m, KvSequence& seq, PagedKvCache& cache, Workspace& ws,
                   std::vector<float> logits, size_t steps) {
  std::vector<ForwardRow> row(1);
  const auto t0 = clock_type::now();
  for (size_t i = 0; i < steps; ++i) {
    const int32_t tok = argmax(logits);
    const size_t pos = seq.length;
    cache.reserve(seq, pos + 1);
    row[0] = ForwardRow{tok, int32_t(pos), &seq, true};
    forward(m, row, cache, ws, logits);
  }
  return since(t0);
}

int run_bench_decode(const BenchDecodeArgs& a) {
  const Device device = parse_device(a.device);
  auto model = Model::on_device(Model::load(a.model_dir), device);
  const std::string device_name =
      device.is_cpu() ? std::string("cpu") : model->linear_backend()->description();
  const ModelConfig& c = model->config();
  const DType kv_dtype = a.kv_dtype == "f32" ? DType::f32 : DType::bf16;
  const size_t max_ctx = *std::max_element(a.contexts.begin(), a.contexts.end());
  c.require_context(max_ctx + a.decode_tokens,
                    fmt::format("--contexts: {} + --decode-tokens {}", max_ctx, a.decode_tokens));
  c.require_context(a.prefill_tokens, fmt::format("--prefill-tokens: {}", a.prefill_tokens));
  PagedKvCache cache(model->kv_config(std::max(max_ctx, a.prefill_tokens) + a.decode_tokens + 16,
                                      kv_dtype));
  // The roofline's rate: the host's read bandwidth, or on a GPU its memory's (where
  // a pass's weights and KV are read from).
  const double bw = device.is_cpu() ? measure_read_bandwidth() : cuda_copy_bandwidth(device.index);
  nlohmann::json rows = nlohmann::json::array();

  for (int t : a.threads) {
    Workspace ws(t);
    // Prefill: a prompt of prefill_tokens, median of `repeats` runs.
    std::vector<double> pf;
    const auto prompt = random_prompt(a.prefill_tokens, c.vocab_size, c.bos_token_id);
    for (int r = 0; r < a.repeats + 1; ++r) {
      KvSequence seq;
      const auto t0 = clock_type::now();
      (void)prefill(*model, prompt, seq, cache, ws, 512);
      if (r > 0) pf.push_back(double(prompt.size()) / since(t0));  // first run warms up
      cache.free(seq);
    }
    for (size_t ctx : a.contexts) {
      KvSequence seq;
      const auto ids = random_prompt(std::max<size_t>(ctx, 1), c.vocab_size, c.bos_token_id);
      auto logits = prefill(*model, ids, seq, cache, ws, 512);
      std::vector<double> dec;
      for (int r = 0; r < a.repeats; ++r) {
        const size_t len = seq.length;
        dec.push_back(double(a.decode_tokens) /
                      time_decode(*model, seq, cache, ws, logits, a.decode_tokens));
        cache.truncate(seq, len);
      }
      cache.free(seq);
      const double tps = median(dec);
      const double avg_ctx = double(ids.size()) + double(a.decode_tokens) / 2.0;
      const double bytes = double(model->weight_bytes_per_step()) +
                           avg_ctx * double(cache.bytes_per_token());
      rows.push_back({{"threads", t},
                      {"context", ctx},
                      {"prefill_tokens_per_second", median(pf)},
                      {"decode_tokens_per_second", tps},
                      {"bytes_per_token", bytes},
                      {"achieved_gb_per_second", bytes * tps / 1e9}});
    }
  }

  if (a.json) {
    nlohmann::json j = {{"model", a.model_dir},
                        {"kv_dtype", a.kv_dtype},
                        {"device", device_name},
                        {"simd", std::string(cpu::simd_path_name(cpu::active_simd_path()))},
                        {"prefill_prompt_tokens", a.prefill_tokens},
                        {"decode_tokens", a.decode_tokens},
                        {device.is_cpu() ? "memory_read_gb_per_second" : "device_copy_gb_per_second", bw / 1e9},
                        {"rows", rows}};
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::cout << fmt::format(
      "bench decode: {} ({} params, {} weights), KV {}, SIMD {}, weight products on {}, median of {}\n"
      "measured {}: {:.1f} GB/s\n\n",
      a.model_dir, model->parameter_count(), dtype_name(c.dtype), a.kv_dtype,
      cpu::simd_path_name(cpu::active_simd_path()), device_name, a.repeats,
      device.is_cpu() ? "memory read bandwidth" : "device memory bandwidth (device-to-device copies, read + write)",
      bw / 1e9);
  std::cout << fmt::format("{:>7} {:>8} {:>14} {:>13} {:>14} {:>11} {:>8}\n", "threads",
                           "context", "prefill tok/s", "decode tok/s", "bytes/token", "GB/s read",
                           "% of bw");
  // % of bw: the share of the roofline's rate (on a device, its memory's; empty when
  // it could not be measured).
  for (const auto& r : rows)
    std::cout << fmt::format("{:>7} {:>8} {:>14.0f} {:>13.1f} {:>14.0f} {:>11.2f} {:>8}\n",
                             r["threads"].get<int>(), r["context"].get<size_t>(),
                             r["prefill_tokens_per_second"].get<double>(),
                             r["decode_tokens_per_second"].get<double>(),
                             r["bytes_per_token"].get<double>(),
                             r["achieved_gb_per_second"].get<double>(),
                             bw > 0.0
                                 ? fmt::format("{:.1f}%", 100.0 * r["achieved_gb_per_second"].get<double>() * 1e9 / bw)
                                 : std::string("-"));
  std::cout << fmt::format("\nprefill: a {}-token prompt; decode: {} greedy tokens after a "
                           "prompt of the given context{}\n",
                           a.prefill_tokens, a.decode_tokens,
                           device.is_cpu() ? ""
                                           : "; % of bw: bytes read per token (weights, KV) x tokens/s over "
                                             "the device's copy bandwidth, the HBM roofline");
  return 0;
}

}  // namespace

void add_bench_decode_command(CLI::App& bench, Runner& run) {
  auto a = std::make_shared<BenchDecodeArgs>();
  CLI::App* cmd = bench.add_subcommand("decode", "Prefill and decode tokens/s (full KV)");
  cmd->add_option("--model", a->model_dir, "Model directory")->capture_default_str();
  cmd->add_option("--contexts", a->contexts, "Context lengths to decode after")
      ->capture_default_str()->check(integer_in(0));
  cmd->add_option("--threads", a->threads, "Thread counts to measure (0 = auto)")
      ->capture_default_str()->check(integer_in(0, 1024));
  cmd->add_option("--prefill-tokens", a->prefill_tokens, "Prompt length for prefill speed")
      ->capture_default_str()->check(integer_in(1));
  cmd->add_option("--decode-tokens", a->decode_tokens, "Tokens decoded per measurement")
      ->capture_default_str()->check(integer_in(1));
  cmd->add_option("--repeats", a->repeats, "Measurements per figure (median)")
      ->capture_default_str()->check(integer_in(1, 1000));
  cmd->add_option("--kv-dtype", a->kv_dtype, "KV cache storage")->capture_default_str()
      ->check(CLI::IsMember({"bf16", "f32"}));
  add_device_option(*cmd, a->device);
  cmd->add_flag("--json", a->json, "Print JSON");
  cmd->callback([&run, a] { run = [a] { return run_bench_decode(*a); }; });
}

}  // namespace vc::cli
