// `vericache compressors`: the compression methods, their parameters and defaults.
#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kvtiers/compressor.hpp"
#include "tools/vericache/commands.hpp"

namespace vc::cli {

namespace {

int run_compressors(bool json) {
  nlohmann::json all = nlohmann::json::array();
  for (const auto& name : compressor_names()) {
    const auto c = make_compressor(name);
    nlohmann::json params = nlohmann::json::array();
    for (const auto& p : c->params())
      params.push_back({{"name", p.name}, {"default", p.value}, {"help", p.help}});
    all.push_back({{"name", name},
                   {"summary", std::string(c->summary())},
                   {"needs_prefill_stats", c->needs_stats()},
                   {"stats_needs",
                    {{"window", c->stats_needs().window},
                     {"accumulated", c->stats_needs().accumulated},
                     {"query_moments", c->stats_needs().query_moments}}},
                   {"params", params}});
  }
  if (json) {
    std::cout << all.dump(2) << "\n";
    return 0;
  }
  for (const auto& c : all) {
    std::cout << fmt::format("{}\n  {}\n", c["name"].get<std::string>(),
                             c["summary"].get<std::string>());
    for (const auto& p : c["params"])
      std::cout << fmt::format("    {:<22} {:>8g}  {}\n", p["name"].get<std::string>(),
                               p["default"].get<double>(), p["help"].get<std::string>());
  }
  std::cout << "\nCompose a dropper with a quantizer as DROP+QUANT, e.g. snapkv+kivi.\n"
               "Every method maps --ratio (full KV bytes / compressed bytes) to its own "
               "parameters.\n";
  return 0;
}

}  // namespace

void add_compressors_command(CLI::App& app, Runner& run) {
  auto json = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand("compressors", "List the KV compression methods");
  cmd->add_flag("--json", *json, "Print JSON");
  cmd->callback([&run, json] { run = [json] { return run_compressors(*json); }; });
}

}  // namespace vc::cli
