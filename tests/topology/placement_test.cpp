// Placement over every recorded topology: the group chosen, the NUMA node of each
// shard and each actor's cores.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <numeric>
#include <string>

#include <gtest/gtest.h>

#include "kernels/error.hpp"
#include "topology/hwloc_topology.hpp"
#include "topology/placement.hpp"

namespace vc {
namespace {

std::string fixture(const std::string& name) {
  return std::string(VC_TEST_DATA_DIR) + "/topologies/" + name + ".xml";
}

Topology read(const std::string& name) { return HwlocTopology(fixture(name)).read(); }

std::vector<unsigned> range(unsigned first, unsigned last) {  // [first, last]
  std::vector<unsigned> v(last - first + 1);
  std::iota(v.begin(), v.end(), first);
  return v;
}

std::vector<unsigned> shard_nodes(const Placement& p) {
  std::vector<unsigned> v;
  for (const auto& s : p.shards) v.push_back(s.numa);
  return v;
}

TEST(placement, picks_the_nvlink_pair_and_keeps_each_rank_on_its_socket) {
  const Topology t = read("two_h100_nvl");
  const Placement p = plan_placement(t, 2);
  EXPECT_EQ(p.gpus, (std::vector<size_t>{0, 1}));
  EXPECT_EQ(p.worst_link, LinkClass::nvlink);
  EXPECT_EQ(shard_nodes(p), (std::vector<unsigned>{0, 1}));
  // Rank 0 on socket 0 (cores 0-15, core 15 set apart for the fetcher), rank 1 on socket 1.
  EXPECT_EQ(p.actor("drafter", 0).cores, range(0, 6));
  EXPECT_EQ(p.actor("verifier", 0).cores, range(7, 13));
  EXPECT_EQ(p.actor("mover", 0).cores, (std::vector<unsigned>{14}));
  EXPECT_EQ(p.actor("drafter", 1).cores, range(16, 23));
  EXPECT_EQ(p.actor("verifier", 1).cores, range(24, 30));
  EXPECT_EQ(p.actor("mover", 1).cores, (std::vector<unsigned>{31}));
  EXPECT_EQ(p.actor("fetcher", -1).cores, (std::vector<unsigned>{15}));
  // Hardware threads: each core's two (Linux numbers SMT siblings +32).
  EXPECT_EQ(p.actor("mover", 1).pus, (std::vector<unsigned>{31, 63}));
  EXPECT_NE(p.shards[1].reason.find("0000:98:00.0"), std::string::npos);
}

TEST(placement, puts_one_h200_and_its_shard_on_the_only_node) {
  const Placement p = plan_placement(read("one_h200"), 1);
  EXPECT_EQ(p.gpus, (std::vector<size_t>{0}));
  EXPECT_EQ(shard_nodes(p), (std::vector<unsigned>{0}));
  EXPECT_EQ(p.actor("drafter", 0).cores, range(0, 6));
  EXPECT_EQ(p.actor("verifier", 0).cores, range(7, 13));
  EXPECT_EQ(p.actor("mover", 0).cores, (std::vector<unsigned>{14}));
  EXPECT_EQ(p.actor("fetcher", -1).cores, (std::vector<unsigned>{15}));
  EXPECT_THROW((void)plan_placement(read("one_h200"), 2), Error);
}

TEST(placement, prefers_a_switch_pair_then_one_socket_then_both) {
  const Topology t = read("eight_gpu_dgx_like");
  const Placement two = plan_placement(t, 2);
  EXPECT_EQ(two.gpus, (std::vector<size_t>{0, 1}));
  EXPECT_EQ(two.worst_link, LinkClass::same_switch);
  EXPECT_EQ(shard_nodes(two), (std::vector<unsigned>{0, 0}));
  // Both ranks local to socket 0 (cores 0-55): 55 for the fetcher, 27 cores each.
  EXPECT_EQ(two.actor("drafter", 0).cores, range(0, 12));
  EXPECT_EQ(two.actor("verifier", 0).cores, range(13, 25));
  EXPECT_EQ(two.actor("mover", 0).cores, (std::vector<unsigned>{26}));
  EXPECT_EQ(two.actor("drafter", 1).cores, range(27, 39));
  EXPECT_EQ(two.actor("verifier", 1).cores, range(40, 52));
  EXPECT_EQ(two.actor("mover", 1).cores, (std::vector<unsigned>{53}));
  EXPECT_EQ(two.actor("fetcher", -1).cores, (std::vector<unsigned>{55}));

  const Placement four = plan_placement(t, 4);
  EXPECT_EQ(four.gpus, (std::vector<size_t>{0, 1, 2, 3}));
  EXPECT_EQ(four.worst_link, LinkClass::same_numa);
  EXPECT_EQ(shard_nodes(four), (std::vector<unsigned>{0, 0, 0, 0}));
  EXPECT_EQ(four.actor("mover", 3).cores, (std::vector<unsigned>{51}));  // 39-51

  const Placement eight = plan_placement(t, 8);
  EXPECT_EQ(eight.worst_link, LinkClass::across_sockets);
  EXPECT_EQ(shard_nodes(eight), (std::vector<unsigned>{0, 0, 0, 0, 1, 1, 1, 1}));
  // Ranks 4-7 split socket 1's cores 56-111, 14 each: 56-69 for rank 4.
  EXPECT_EQ(eight.actor("drafter", 4).cores, range(56, 62));
  EXPECT_EQ(eight.actor("verifier", 4).cores, range(63, 68));
  EXPECT_EQ(eight.actor("mover", 4).cores, (std::vector<unsigned>{69}));
}

TEST(placement, splits_one_numa_node_between_two_pcie_gpus) {
  const Placement p = plan_placement(read("two_gpu_one_numa"), 2);
  EXPECT_EQ(p.gpus, (std::vector<size_t>{0, 1}));
  EXPECT_EQ(p.worst_link, LinkClass::same_numa);
  EXPECT_EQ(shard_nodes(p), (std::vector<unsigned>{0, 0}));
  EXPECT_EQ(p.actor("drafter", 0).cores, (std::vector<unsigned>{0}));
  EXPECT_EQ(p.actor("verifier", 0).cores, (std::vector<unsigned>{1}));
  EXPECT_EQ(p.actor("mover", 0).cores, (std::vector<unsigned>{2}));
  EXPECT_EQ(p.actor("drafter", 1).cores, (std::vector<unsigned>{3}));
  EXPECT_EQ(p.actor("mover", 1).cores, (std::vector<unsigned>{5}));
  EXPECT_EQ(p.actor("fetcher", -1).cores, (std::vector<unsigned>{7}));
  EXPECT_EQ(p.actor("drafter", 0).pus, (std::vector<unsigned>{0, 8}));
}

TEST(placement, runs_cpu_ranks_on_the_recorded_build_machine) {
  const Topology t = read("this_machine");
  const Placement one = plan_placement(t, 1);
  EXPECT_TRUE(one.gpus.empty());
  EXPECT_EQ(shard_nodes(one), (std::vector<unsigned>{0}));
  // A CPU rank's compute spans its cores: at degree 1 every actor has both.
  const std::vector<unsigned> both{0, 1};
  EXPECT_EQ(one.actor("drafter", 0).cores, both);
  EXPECT_EQ(one.actor("verifier", 0).cores, both);
  EXPECT_EQ(one.actor("mover", 0).cores, both);
  EXPECT_NE(one.actor("drafter", 0).reason.find("CPU rank: its compute spans every core"), std::string::npos);
  // The NIC (virtio, 0000:00:03.0) is local to both cores; core 1 carries no more actors.
  EXPECT_EQ(one.actor("fetcher", -1).cores, (std::vector<unsigned>{1}));
  EXPECT_NE(one.actor("fetcher", -1).reason.find("0000:00:03.0"), std::string::npos);
  // Two ranks split the node: one core each, every actor of a rank on it.
  const Placement two = plan_placement(t, 2);
  EXPECT_EQ(two.actor("drafter", 0).cores, (std::vector<unsigned>{0}));
  EXPECT_EQ(two.actor("verifier", 0).cores, (std::vector<unsigned>{0}));
  EXPECT_EQ(two.actor("mover", 1).cores, (std::vector<unsigned>{1}));
}

// Over every recorded topology and degree: actors sit on cores local to their GPU,
// shards on a NUMA node local to it, and every choice has a reason.
TEST(placement, keeps_every_actor_and_shard_local_on_every_recorded_topology) {
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(std::string(VC_TEST_DATA_DIR) + "/topologies")) {
    if (e.path().extension() != ".xml") continue;
    ++files;
    const Topology t = HwlocTopology(e.path().string()).read();
    const size_t max_tp = std::max<size_t>(1, t.gpus.size());
    for (size_t tp = 1; tp <= max_tp; tp *= 2) {
      SCOPED_TRACE(e.path().filename().string() + " tp " + std::to_string(tp));
      const Placement p = plan_placement(t, tp);
      ASSERT_EQ(p.shards.size(), tp);
      ASSERT_EQ(p.actors.size(), 3 * tp + 1);
      EXPECT_FALSE(p.group_reason.empty());
      for (const auto& a : p.actors) {
        EXPECT_FALSE(a.cores.empty());
        EXPECT_FALSE(a.reason.empty());
        if (a.rank < 0 || t.gpus.empty()) continue;
        const auto& local = t.gpus[p.gpus[size_t(a.rank)]].pci.cores;
        for (unsigned c : a.cores) EXPECT_NE(std::find(local.begin(), local.end(), c), local.end());
      }
      for (const auto& s : p.shards) {
        if (t.gpus.empty()) continue;
        const auto& numa = t.gpus[p.gpus[s.rank]].pci.numa;
        EXPECT_NE(std::find(numa.begin(), numa.end(), s.numa), numa.end());
      }
    }
  }
  EXPECT_EQ(files, 5u);
}

// n GPUs in switch pairs, 8 to a host bridge, half of them on each socket.
Topology many_gpus(size_t n) {
  Topology t;
  t.source = "synthetic";
  t.numa.push_back({0, 1ull << 30, {0}});
  t.cores.push_back({0, 0, {0}});
  for (size_t i = 0; i < n; ++i) {
    Gpu g;
    g.pci.bus_id = "0000:" + std::to_string(10 + i / 8) + ":00." + std::to_string(i % 8);
    g.pci.numa = {0};
    g.pci.cores = {0};
    t.gpus.push_back(g);
  }
  t.links.resize(n * n);
  for (size_t a = 0; a < n; ++a)
    for (size_t b = 0; b < n; ++b)
      t.links[a * n + b] = a == b                     ? LinkClass::nvlink
                           : a / 2 == b / 2           ? LinkClass::same_switch
                           : a / 8 == b / 8           ? LinkClass::same_host_bridge
                           : (a < n / 2) == (b < n / 2) ? LinkClass::same_numa
                                                      : LinkClass::across_sockets;
  return t;
}

// The greedy search rescored the whole group for every candidate: 512 GPUs at --tp
// 256 took over 90 s, 256 at --tp 128 20 s.
TEST(placement, groups_half_of_512_gpus_quickly_and_on_one_socket) {
  const Topology t = many_gpus(512);
  const auto start = std::chrono::steady_clock::now();
  const Placement p = plan_placement(t, 256);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 5.0);
  ASSERT_EQ(p.gpus.size(), 256u);
  EXPECT_EQ(p.worst_link, LinkClass::same_numa);
  EXPECT_EQ(p.gpus.front(), 0u);
  EXPECT_EQ(p.gpus.back(), 255u);
  const Placement eight = plan_placement(many_gpus(64), 8);
  EXPECT_EQ(eight.worst_link, LinkClass::same_host_bridge);
  EXPECT_EQ(eight.gpus, (std::vector<size_t>{0, 1, 2, 3, 4, 5, 6, 7}));
}

TEST(placement, rejects_a_zero_degree) {
  EXPECT_THROW((void)plan_placement(read("two_h100_nvl"), 0), Error);
}

}  // namespace
}  // namespace vc
