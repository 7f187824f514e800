// `vericache bench rows`: the cost of one forward pass of 1..64 rows of one sequence
// at a given context (a verify pass of L+1 rows), against one row.
#include <algorithm>
#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kernels/cpu/cpu_features.hpp"
#include "runtime/forward.hpp"
#include "runtime/row_cost.hpp"
#include "tools/vericache/commands.hpp"
#include "tools/vericache/options.hpp"

namespace vc::cli {

namespace {

struct BenchRowsArgs {
  std::string model_dir = default_model_dir();
  size_t context = 4096;
  std::vector<size_t> rows = {1, 2, 4, 8, 16, 32, 64};
  int repeats = 5;
  int threads = 0;
  std::string device = "cpu";
  bool json = false;
};

int run_bench_rows(const BenchRowsArgs& a) {
  auto model = Model::on_device(Model::load(a.model_dir), parse_device(a.device));
  const ModelConfig& c = model->config();
  const int threads = a.threads > 0 ? a.threads : default_thread_count();
  const std::vector<double> secs = measure_row_costs(*model, a.context, a.rows, a.repeats, threads);
  // The ratio is against the 1-row figure when measured, else the smallest row count.
  const size_t base = size_t(std::min_element(a.rows.begin(), a.rows.end()) - a.rows.begin());
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < a.rows.size(); ++i)
    out.push_back({{"rows", a.rows[i]},
                   {"ms_per_pass", secs[i] * 1e3},
                   {"ms_per_row", secs[i] * 1e3 / double(a.rows[i])},
                   {"ratio_to_smallest", secs[i] / secs[base]}});
  if (a.json) {
    std::cout << nlohmann::json{{"model", a.model_dir},
                                {"parameters", model->parameter_count()},
                                {"context", a.context},
                                {"threads", threads},
                                {"repeats", a.repeats},
                                {"simd", std::string(cpu::simd_path_name(cpu::active_simd_path()))},
                                {"device", model->device().str()},
                                {"rows", out}}
                     .dump(2)
              << "\n";
    return 0;
  }
  std::cout << fmt::format(
      "bench rows: {} ({} params, {} layers, hidden {}, {}/{} heads), context {}, KV bf16, "
      "{} thread{}, SIMD {}, weight products on {}, median of {}\n\n",
      a.model_dir, model->parameter_count(), c.num_layers, c.hidden_size, c.num_heads,
      c.num_kv_heads, a.context, threads, threads == 1 ? "" : "s",
      cpu::simd_path_name(cpu::active_simd_path()), model->device().str(), a.repeats);
  std::cout << fmt::format("{:>5} {:>12} {:>11} {:>9}\n", "rows", "ms/pass", "ms/row",
                           fmt::format("x {}-row", a.rows[base]));
  for (const auto& r : out)
    std::cout << fmt::format("{:>5} {:>12.3f} {:>11.3f} {:>8.2f}x\n", r["rows"].get<size_t>(),
                             r["ms_per_pass"].get<double>(), r["ms_per_row"].get<double>(),
                             r["ratio_to_smallest"].get<double>());
  std::cout << fmt::format("\none pass: n rows of one sequence at positions {}..{}+n-1, all with "
                           "logits (a verify pass of n-1 drafts), over {} positions of KV\n",
                           a.context, a.context, a.context);
  return 0;
}

}  // namespace

void add_bench_rows_command(CLI::App& bench, Runner& run) {
  auto a = std::make_shared<BenchRowsArgs>();
  CLI::App* cmd = bench.add_subcommand("rows", "Cost of one forward pass of 1..64 rows (verify)");
  cmd->add_option("--model", a->model_dir, "Model directory")->capture_default_str();
  cmd->add_option("--context", a->context, "KV positions each pass attends over")
      ->capture_default_str()->check(integer_in(0, 1 << 24));
  cmd->add_option("--rows", a->rows, "Row counts to measure")
      ->capture_default_str()->check(integer_in(1, 4096));
  cmd->add_option("--repeats", a->repeats, "Measurements per figure (median)")
      ->capture_default_str()->check(integer_in(1, 1000));
  cmd->add_option("--threads", a->threads, "Threads (0 = auto)")
      ->capture_default_str()->check(integer_in(0, 1024));
  add_device_option(*cmd, a->device);
  cmd->add_flag("--json", a->json, "Print JSON");
  cmd->callback([&run, a] { run = [a] { return run_bench_rows(*a); }; });
}

}  // namespace vc::cli
