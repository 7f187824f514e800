// Fuzzes the `--config FILE` reader (vc::cli::StrictConfig, tools/vericache/options.*):
// the input is the file, parsed by CLI11 as `vericache --config FILE generate
// --prompt x` and `... bench decode`. The app below has the CLI's shape (sections,
// nested bench.decode, options of each kind: integers, numbers, seed, draft, members,
// lists, flags) with the CLI's own validators, so that fuzzing needs only options.cpp
// and the validation layer, not the whole CLI and its actors. Only CLI11's errors
// and vc::Error may come out.
#include <cstdint>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "kernels/error.hpp"
#include "tests/fuzz/fuzz_support.hpp"
#include "tools/vericache/options.hpp"

namespace {

using vc::cli::draft_value;
using vc::cli::integer_in;
using vc::cli::number_in;
using vc::cli::seed_value;

struct Values {
  std::string model, prompt, mode = "full", draft = "16", kv_dtype = "bf16", log_level = "warn";
  int64_t max_tokens = 128, top_k = 0, threads = 0;
  double temperature = 0, top_p = 1, ratio = 4;
  uint64_t seed = 0;
  std::vector<std::string> stop, compressor_params;
  std::vector<int64_t> contexts, thread_counts;
  bool json = false, ignore_eos = false;
};

void parse(const std::string& path, std::vector<std::string> args) {
  Values v;
  CLI::App app{"vericache"};
  app.require_subcommand(1);
  CLI::Option* config_option = app.set_config("--config", "", "config file");
  auto config = std::make_shared<vc::cli::StrictConfig>(app, config_option);
  app.config_formatter(config);
  app.add_option("--log-level", v.log_level)->check(CLI::IsMember({"trace", "warn", "off"}));

  CLI::App* gen = app.add_subcommand("generate");
  gen->add_option("--model", v.model);
  gen->add_option("--prompt", v.prompt);
  gen->add_option("--max-tokens", v.max_tokens)->check(integer_in(1, int64_t(1) << 30));
  gen->add_option("--temperature", v.temperature)->check(number_in(0.0, 100.0));
  gen->add_option("--top-k", v.top_k)->check(integer_in(0));
  gen->add_option("--top-p", v.top_p)->check(number_in(0.0, 1.0, true));
  gen->add_option("--seed", v.seed)->check(seed_value());
  gen->add_option("--stop", v.stop);
  gen->add_flag("--ignore-eos", v.ignore_eos);
  gen->add_flag("--json", v.json);
  gen->add_option("--threads", v.threads)->check(integer_in(0, 1024));
  gen->add_option("--mode", v.mode)->check(CLI::IsMember({"full", "lossy", "vericache"}));
  gen->add_option("--draft", v.draft)->check(draft_value());
  gen->add_option("--compressor-param", v.compressor_params);
  gen->add_option("--ratio", v.ratio)->check(number_in(1.0, 1000.0));

  CLI::App* bench = app.add_subcommand("bench");
  bench->require_subcommand(1);
  CLI::App* decode = bench->add_subcommand("decode");
  decode->add_option("--contexts", v.contexts)->check(integer_in(1, int64_t(1) << 30));
  decode->add_option("--threads", v.thread_counts)->check(integer_in(0, 1024));
  decode->add_option("--kv-dtype", v.kv_dtype)->check(CLI::IsMember({"bf16", "f32"}));
  decode->add_flag("--json", v.json);
  bench->add_subcommand("throughput")->add_option("--ratio", v.ratio)->check(number_in(1.0, 1000.0));

  std::vector<std::string> argv = {"vericache", "--config", path};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> ptrs;
  for (auto& a : argv) ptrs.push_back(a.data());
  std::string message;
  try {
    app.parse(int(ptrs.size()), ptrs.data());
  } catch (const CLI::Error& e) {
    message = e.what();
  } catch (const vc::Error& e) {
    message = e.what();
  }
  // What main() does with the message: find the config line that set the option.
  std::ostringstream devnull;
  std::streambuf* old = std::cerr.rdbuf(devnull.rdbuf());
  vc::cli::report_error(message, config.get());
  std::cerr.rdbuf(old);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = vc::fuzz::write_file("vc.conf", vc::fuzz::as_text(data, size)).string();
  parse(path, {"generate", "--prompt", "x"});
  parse(path, {"bench", "decode"});
  return 0;
}
