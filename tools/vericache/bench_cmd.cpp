// `vericache bench ...`: benchmarks that print a table (or JSON).
#include "tools/vericache/commands.hpp"

namespace vc::cli {

void add_bench_decode_command(CLI::App& bench, Runner& run);
void add_bench_divergence_command(CLI::App& bench, Runner& run);
void add_bench_acceptance_command(CLI::App& bench, Runner& run);
void add_bench_throughput_command(CLI::App& bench, Runner& run);
void add_bench_rows_command(CLI::App& bench, Runner& run);
void add_bench_memory_command(CLI::App& bench, Runner& run);
void add_bench_remote_command(CLI::App& bench, Runner& run);
void add_bench_remote_mix_command(CLI::App& bench, Runner& run);
void add_bench_tp_command(CLI::App& bench, Runner& run);
void add_bench_attention_command(CLI::App& bench, Runner& run);
void add_bench_interleave_command(CLI::App& bench, Runner& run);

void add_bench_command(CLI::App& app, Runner& run) {
  CLI::App* bench = app.add_subcommand("bench", "Measure and print tables");
  bench->require_subcommand(1);
  add_bench_decode_command(*bench, run);
  add_bench_divergence_command(*bench, run);
  add_bench_acceptance_command(*bench, run);
  add_bench_throughput_command(*bench, run);
  add_bench_rows_command(*bench, run);
  add_bench_memory_command(*bench, run);
  add_bench_remote_command(*bench, run);
  add_bench_remote_mix_command(*bench, run);
  add_bench_tp_command(*bench, run);
  add_bench_attention_command(*bench, run);
  add_bench_interleave_command(*bench, run);
}

}  // namespace vc::cli
