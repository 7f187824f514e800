// EngineConfig::placement "auto": every rank's drafter, verifier and mover threads
// (and each net_fetcher's) run bound where the plan puts them, as the kernel
// itself reports in /proc, and the output is the unbound engine's bit for bit.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <vericache/engine.hpp>

#include "tests/error_naming.hpp"
#include "tests/kvtiers/redis_server.hpp"
#include "tests/runtime/test_support.hpp"
#include "topology/hwloc_topology.hpp"
#include "topology/placement.hpp"

namespace {

using vericache::Engine;
using vericache::EngineConfig;
using vericache::Request;

EngineConfig config(int tp, const std::string& placement) {
  EngineConfig c;
  c.model_dir = VC_MODEL_DIR;
  c.tp = tp;
  c.threads = 2;
  c.placement = placement;
  return c;
}

Request request(uint32_t seed) {
  std::mt19937 rng(seed);
  const auto& c = vc::test::tinycode()->config();
  Request r;
  r.prompt_ids = vc::test::random_tokens(rng, 200, c.vocab_size, c.bos_token_id);
  r.max_tokens = 24;
  r.ignore_eos = true;
  r.draft = "6";
  r.temperature = 0.8f;
  r.seed = 99;
  return r;
}

// "0-2,5" -> {0, 1, 2, 5}
std::set<unsigned> parse_cpu_list(const std::string& text) {
  std::set<unsigned> out;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, ',')) {
    const auto dash = part.find('-');
    const unsigned lo = unsigned(std::stoul(part.substr(0, dash)));
    const unsigned hi = dash == std::string::npos ? lo : unsigned(std::stoul(part.substr(dash + 1)));
    for (unsigned c = lo; c <= hi; ++c) out.insert(c);
  }
  return out;
}

// How many of this process's threads the kernel allows on exactly each CPU set.
std::map<std::set<unsigned>, size_t> threads_by_allowed_cpus() {
  std::map<std::set<unsigned>, size_t> out;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream status(task.path() / "status");
    for (std::string line; std::getline(status, line);)
      if (line.rfind("Cpus_allowed_list:", 0) == 0) ++out[parse_cpu_list(line.substr(18))];
  }
  return out;
}

TEST(engine_placement, binds_every_ranks_threads_where_the_plan_puts_them_and_decodes_as_unbound) {
  vericache::Result want;
  {
    Engine unbound(config(2, "none"));
    EXPECT_TRUE(unbound.placement().empty());
    want = unbound.submit(request(5)).result.get();
    ASSERT_TRUE(want.ok) << want.error;
  }
  Engine engine(config(2, "auto"));
  const auto& all = engine.placement();
  // First each rank's host full tier: its chunks bound to the rank's node (CPU ranks).
  ASSERT_GE(all.size(), 2u);
  for (size_t r = 0; r < 2; ++r) {
    EXPECT_EQ(all[r].what, "full tier rank " + std::to_string(r));
    EXPECT_TRUE(all[r].applied) << all[r].detail;
    EXPECT_NE(all[r].detail.find("chunks bound to node P#"), std::string::npos) << all[r].detail;
    EXPECT_NE(all[r].detail.find("the rank's"), std::string::npos) << all[r].detail;
  }
  const std::vector<vericache::PlacementLine> lines(all.begin() + 2, all.end());
  const std::vector<std::string> expected = {"drafter rank 0", "verifier rank 0", "mover rank 0",
                                             "drafter rank 1", "verifier rank 1", "mover rank 1"};
  ASSERT_EQ(lines.size(), expected.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    EXPECT_EQ(lines[i].what, expected[i]);
    EXPECT_TRUE(lines[i].applied) << lines[i].what << ": " << lines[i].detail;
    // Two compute threads each; a mover's rank thread and the copy thread of each
    // verify lane.
    const size_t threads = lines[i].what.starts_with("mover") ? 1 + EngineConfig{}.verify_batch : 2;
    EXPECT_NE(lines[i].detail.find(std::to_string(threads) + " threads bound to PU"), std::string::npos)
        << lines[i].detail;
    EXPECT_NE(lines[i].detail.find("memory bound to node P#"), std::string::npos) << lines[i].detail;
  }
  // The kernel's own view: at least the planned number of threads per CPU set.
  vc::HwlocTopology here;
  vc::Topology cpu_ranks = here.read();  // the engine plans CPU ranks
  cpu_ranks.gpus.clear();
  const vc::Placement plan = vc::plan_placement(cpu_ranks, 2);
  std::map<std::set<unsigned>, size_t> planned;
  for (const auto& a : plan.actors)
    if (a.rank >= 0) planned[std::set<unsigned>(a.pus.begin(), a.pus.end())] += 2;
  const auto seen = threads_by_allowed_cpus();
  for (const auto& [cpus, n] : planned) {
    const auto it = seen.find(cpus);
    EXPECT_GE(it == seen.end() ? 0 : it->second, n) << "threads allowed on exactly the planned CPUs";
  }
  const vericache::Result got = engine.submit(request(5)).result.get();
  ASSERT_TRUE(got.ok) << got.error;
  EXPECT_EQ(got.output_ids, want.output_ids);
  EXPECT_EQ(got.output_logprobs, want.output_logprobs);
}

TEST(engine_placement, binds_each_net_fetchers_rank_threads_near_the_nic) {
  vc::test::RedisServer server;
  EngineConfig c = config(2, "auto");
  c.remote_url = server.url();
  c.remote_fetchers = 2;
  Engine engine(c);
  const auto& lines = engine.placement();
  ASSERT_EQ(lines.size(), 9u);  // each rank's full tier; its drafter, verifier, mover; the fetchers
  EXPECT_EQ(lines.back().what, "fetcher");
  EXPECT_TRUE(lines.back().applied) << lines.back().detail;
  // Two fetchers, each with a thread per rank (rank 0's is the actor's own).
  EXPECT_NE(lines.back().detail.find("4 threads bound to PU"), std::string::npos) << lines.back().detail;
  const vericache::Result got = engine.submit(request(6)).result.get();
  EXPECT_TRUE(got.ok) << got.error;
}

TEST(engine_placement, names_a_placement_it_does_not_know) {
  vc::test::expect_error_naming([] { Engine e(config(1, "numa")); },
                                 "EngineConfig.placement: expected none or auto, got 'numa'");
}

}  // namespace
