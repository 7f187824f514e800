// Reading hwloc topologies (recorded XML and this machine) into the plain Topology.
#include <string>

#include <gtest/gtest.h>

#include "kernels/error.hpp"
#include "topology/hwloc_topology.hpp"

namespace vc {
namespace {

std::string fixture(const std::string& name) {
  return std::string(VC_TEST_DATA_DIR) + "/topologies/" + name + ".xml";
}

Topology read(const std::string& name) { return HwlocTopology(fixture(name)).read(); }

TEST(topology, reads_two_sockets_and_their_gpus_from_a_recorded_xml) {
  const Topology t = read("two_h100_nvl");
  EXPECT_FALSE(t.this_system);
  EXPECT_EQ(t.packages, 2u);
  ASSERT_EQ(t.numa.size(), 2u);
  EXPECT_EQ(t.numa[1].memory_bytes, 256ull << 30);
  EXPECT_EQ(t.cores.size(), 32u);
  EXPECT_EQ(t.numa[0].cores.size(), 16u);
  EXPECT_EQ(t.cores[16].numa, 1u);
  EXPECT_EQ(t.cores[0].pus, (std::vector<unsigned>{0, 32}));
  ASSERT_EQ(t.gpus.size(), 2u);
  EXPECT_EQ(t.gpus[0].pci.bus_id, "0000:18:00.0");
  EXPECT_EQ(t.gpus[1].pci.bus_id, "0000:98:00.0");
  EXPECT_EQ(t.gpus[0].model, "NVIDIA H100 NVL");
  EXPECT_EQ(t.gpus[0].memory_bytes, 98566144ull * 1024);
  EXPECT_EQ(t.gpus[1].pci.numa, (std::vector<unsigned>{1}));
  EXPECT_EQ(t.gpus[1].pci.cores.size(), 16u);
  EXPECT_EQ(t.gpus[1].pci.cores.front(), 16u);
  EXPECT_NEAR(t.gpus[0].pci.link_gbytes_s, 63.0, 0.1);
}

TEST(topology, finds_a_gpu_by_the_bus_id_cuda_writes_in_any_case) {
  const Topology t = read("two_h100_nvl");
  ASSERT_NE(t.gpu_at("0000:98:00.0"), nullptr);
  EXPECT_EQ(t.gpu_at("0000:98:00.0"), &t.gpus[1]);
  EXPECT_EQ(t.gpu_at("0000:98:00.0")->pci.numa, (std::vector<unsigned>{1}));
  const Topology dgx = read("eight_gpu_dgx_like");
  for (const Gpu& g : dgx.gpus) {
    std::string upper = g.pci.bus_id;  // cudaDeviceGetPCIBusId writes hex digits upper case
    for (char& c : upper) c = char(std::toupper(static_cast<unsigned char>(c)));
    EXPECT_EQ(dgx.gpu_at(upper), &g) << upper;
  }
  EXPECT_EQ(t.gpu_at("98:00.0"), &t.gpus[1]) << "the domain left out";
  EXPECT_EQ(t.gpu_at("0000:99:00.0"), nullptr);
  EXPECT_EQ(t.gpu_at(""), nullptr);
  EXPECT_EQ(t.gpu_at("not a bus id"), nullptr);
}

TEST(topology, takes_nvlink_from_the_recorded_distances_matrix) {
  const Topology t = read("two_h100_nvl");
  EXPECT_EQ(t.link(0, 1), LinkClass::nvlink);
  EXPECT_EQ(t.link(1, 0), LinkClass::nvlink);
  EXPECT_EQ(t.links_from, "recorded NVLinkBandwidth + PCI tree");
}

TEST(topology, classes_pci_links_by_their_common_ancestor) {
  const Topology t = read("eight_gpu_dgx_like");
  ASSERT_EQ(t.gpus.size(), 8u);
  EXPECT_EQ(t.links_from, "PCI tree");
  EXPECT_EQ(t.link(0, 1), LinkClass::same_switch);     // 18 and 19 share a switch
  EXPECT_EQ(t.link(0, 2), LinkClass::same_numa);       // 18 and 3a: two host bridges of socket 0
  EXPECT_EQ(t.link(0, 4), LinkClass::across_sockets);  // 18 and 9a
  EXPECT_EQ(t.link(6, 7), LinkClass::same_switch);
  EXPECT_EQ(t.gpus[0].pci.path.size(), 4u);  // host bridge, root port, switch up, switch down
  const Topology one = read("two_gpu_one_numa");
  EXPECT_EQ(one.link(0, 1), LinkClass::same_numa);
}

TEST(topology, finds_no_gpu_and_one_nic_on_the_recorded_build_machine) {
  const Topology t = read("this_machine");
  EXPECT_EQ(t.cores.size(), 2u);
  EXPECT_TRUE(t.gpus.empty());
  ASSERT_EQ(t.nics.size(), 1u);
  EXPECT_EQ(t.nics[0].pci.bus_id, "0000:00:03.0");
  EXPECT_EQ(t.nics[0].pci.numa, (std::vector<unsigned>{0}));
}

TEST(topology, reads_this_machine_live) {
  HwlocTopology h;
  EXPECT_TRUE(h.is_this_system());
  const Topology t = h.read();
  EXPECT_TRUE(t.this_system);
  EXPECT_FALSE(t.cores.empty());
  EXPECT_FALSE(t.numa.empty());
  for (const auto& c : t.cores) EXPECT_FALSE(c.pus.empty());
}

TEST(topology, names_a_missing_or_malformed_file) {
  try {
    HwlocTopology h("/nonexistent/topo.xml");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/topo.xml"), std::string::npos);
  }
  EXPECT_THROW(HwlocTopology(std::string(VC_TEST_DATA_DIR) + "/visible.json"), Error);
}

TEST(topology, canonicalises_bus_ids) {
  EXPECT_EQ(canonical_bus_id("0000:9A:00.0"), "0000:9a:00.0");
  EXPECT_EQ(canonical_bus_id("9a:00.0"), "0000:9a:00.0");
  EXPECT_EQ(canonical_bus_id("00000000:18:00.0"), "0000:18:00.0");
  EXPECT_THROW((void)canonical_bus_id("gpu0"), Error);
}

}  // namespace
}  // namespace vc
