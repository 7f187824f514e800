// An engine's threads bound to a placement: each binding is read back by hwloc
// here, independently of what the binder reports, and a recorded topology or an
// actor the plan lacks binds nothing and says so.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "topology/placement_binder.hpp"

namespace vc {
namespace {

std::vector<unsigned> cpubind_of(const HwlocTopology& h, pthread_t t) {
  hwloc_bitmap_t set = hwloc_bitmap_alloc();
  std::vector<unsigned> out;
  if (hwloc_get_thread_cpubind(h.handle(), t, set, 0) == 0)
    for (int i = hwloc_bitmap_first(set); i >= 0; i = hwloc_bitmap_next(set, i)) out.push_back(unsigned(i));
  hwloc_bitmap_free(set);
  return out;
}

TEST(placement_binder, binds_a_calling_thread_to_its_actors_pus_and_its_memory_to_the_shards_node) {
  HwlocTopology h;
  PlacementBinder binder(h, plan_placement(h.read(), 1));
  const ActorPlace& drafter = binder.plan().actor("drafter", 0);
  std::vector<unsigned> ran_on;
  std::vector<unsigned> memory_nodes;
  std::thread([&] {
    binder.bind_calling_thread("drafter", 0);
    ran_on = cpubind_of(h, pthread_self());
    hwloc_bitmap_t nodes = hwloc_bitmap_alloc();
    hwloc_membind_policy_t policy{};
    if (hwloc_get_membind(h.handle(), nodes, &policy, HWLOC_MEMBIND_THREAD | HWLOC_MEMBIND_BYNODESET) == 0 &&
        policy == HWLOC_MEMBIND_BIND)
      for (int i = hwloc_bitmap_first(nodes); i >= 0; i = hwloc_bitmap_next(nodes, i))
        memory_nodes.push_back(unsigned(i));
    hwloc_bitmap_free(nodes);
  }).join();
  EXPECT_EQ(ran_on, drafter.pus);
  EXPECT_EQ(memory_nodes, std::vector<unsigned>{binder.plan().shards[0].numa});
  const auto report = binder.report();
  ASSERT_EQ(report.size(), 1u);
  EXPECT_EQ(report[0].what, "drafter rank 0");
  EXPECT_TRUE(report[0].applied) << report[0].detail;
  EXPECT_NE(report[0].detail.find("1 thread bound to PU"), std::string::npos) << report[0].detail;
  EXPECT_NE(report[0].detail.find("memory bound to node P#"), std::string::npos) << report[0].detail;
}

TEST(placement_binder, binds_another_thread_and_counts_every_thread_of_an_actor) {
  HwlocTopology h;
  PlacementBinder binder(h, plan_placement(h.read(), 1));
  const ActorPlace& mover = binder.plan().actor("mover", 0);
  std::thread copy([] { std::this_thread::sleep_for(std::chrono::milliseconds(200)); });
  binder.bind_thread(copy.native_handle(), "mover", 0);
  EXPECT_EQ(cpubind_of(h, copy.native_handle()), mover.pus);
  std::thread([&] { binder.bind_calling_thread("mover", 0); }).join();
  copy.join();
  const auto report = binder.report();
  ASSERT_EQ(report.size(), 1u);
  EXPECT_EQ(report[0].what, "mover rank 0");
  EXPECT_TRUE(report[0].applied) << report[0].detail;
  EXPECT_NE(report[0].detail.find("2 threads"), std::string::npos) << report[0].detail;
}

TEST(placement_binder, binds_nothing_for_an_actor_the_plan_lacks_or_on_a_recorded_topology) {
  HwlocTopology here;
  PlacementBinder live(here, plan_placement(here.read(), 1));
  std::thread([&] { live.bind_calling_thread("painter", 3); }).join();
  auto report = live.report();
  ASSERT_EQ(report.size(), 1u);
  EXPECT_EQ(report[0].what, "painter rank 3");
  EXPECT_FALSE(report[0].applied);
  EXPECT_NE(report[0].detail.find("the plan has no such actor"), std::string::npos) << report[0].detail;

  HwlocTopology recorded(std::string(VC_TEST_DATA_DIR) + "/topologies/two_h100_nvl.xml");
  PlacementBinder binder(recorded, plan_placement(recorded.read(), 2));
  std::vector<unsigned> before, after;
  std::thread([&] {
    before = cpubind_of(here, pthread_self());
    binder.bind_calling_thread("verifier", 1);
    after = cpubind_of(here, pthread_self());
  }).join();
  EXPECT_EQ(before, after);
  report = binder.report();
  ASSERT_EQ(report.size(), 1u);
  EXPECT_EQ(report[0].what, "verifier rank 1");
  EXPECT_FALSE(report[0].applied);
  EXPECT_NE(report[0].detail.find("not this machine"), std::string::npos) << report[0].detail;
}

}  // namespace
}  // namespace vc
