// Applying a placement on this machine: threads run where they are bound, shard
// memory lies on its node; a recorded topology binds nothing.
#include <cstdlib>
#include <cstring>
#include <string>

#include <gtest/gtest.h>

#include "kernels/error.hpp"
#include "topology/binding.hpp"

namespace vc {
namespace {

TEST(binding, runs_each_actor_on_its_cores_and_each_shard_on_its_node_here) {
  HwlocTopology h;
  const Topology t = h.read();
  const Placement p = plan_placement(t, 1);
  const auto applied = apply_placement(h, p);
  ASSERT_EQ(applied.size(), p.actors.size() + p.shards.size());
  for (const auto& a : applied) EXPECT_TRUE(a.applied) << a.what << ": " << a.detail;
}

TEST(binding, binds_memory_to_a_numa_node_and_reads_it_back) {
  HwlocTopology h;
  const unsigned node = h.read().numa.front().os_index;
  NumaBuffer b(h, 4 << 20, node);
  EXPECT_EQ(b.nodes(), std::vector<unsigned>{node});
  EXPECT_THROW(NumaBuffer(h, 4096, 999), Error);
}

TEST(binding, binds_an_untouched_area_to_a_node_before_its_pages_exist) {
  HwlocTopology h;
  const unsigned node = h.read().numa.front().os_index;
  const size_t bytes = size_t(4) << 20;
  void* p = nullptr;
  ASSERT_EQ(posix_memalign(&p, 4096, bytes), 0);
  EXPECT_EQ(bind_area(h, p, bytes, node), "");
  std::memset(p, 1, bytes);  // first touch
  EXPECT_EQ(area_nodes(h, p, bytes), std::vector<unsigned>{node});
  EXPECT_NE(bind_area(h, p, bytes, 999).find("no NUMA node P#999"), std::string::npos);
  HwlocTopology recorded(std::string(VC_TEST_DATA_DIR) + "/topologies/two_h100_nvl.xml");
  EXPECT_NE(bind_area(recorded, p, bytes, 0).find("not this machine"), std::string::npos);
  std::free(p);
}

TEST(binding, binds_nothing_on_a_recorded_topology) {
  HwlocTopology h(std::string(VC_TEST_DATA_DIR) + "/topologies/two_h100_nvl.xml");
  const auto applied = apply_placement(h, plan_placement(h.read(), 2));
  for (const auto& a : applied) {
    EXPECT_FALSE(a.applied);
    EXPECT_NE(a.detail.find("not this machine"), std::string::npos) << a.detail;
  }
  EXPECT_FALSE(bind_this_thread(h, {0}).empty());
}

}  // namespace
}  // namespace vc
