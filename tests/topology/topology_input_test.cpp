// A recorded topology is input: a bad one is an error naming the file and what is
// wrong, never a crash, a hang or a silently wrong topology. Each case edits a
// recorded fixture into a temp file.
#include <cstdlib>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "kernels/error.hpp"
#include "tests/error_naming.hpp"
#include "tests/topology/edited_fixture.hpp"
#include "topology/hwloc_topology.hpp"
#include "topology/topology_file.hpp"

namespace vc {
namespace {

using test::expect_error_naming;
using test::replace_first;
using test::TempXml;
using test::topology_fixture_text;

const std::string kGpu0 =
    R"(pci_busid="0000:18:00.0" pci_type="0302 [10de:2321] [10de:1839] a1" pci_link_speed="63.015385")";

// two_h100_nvl with `from` replaced by `to`, read.
void read_edited(const std::string& from, const std::string& to, const std::string& error) {
  const TempXml f(replace_first(topology_fixture_text("two_h100_nvl"), from, to));
  expect_error_naming([&] { (void)HwlocTopology(f.path()).read(); }, f.path());
  expect_error_naming([&] { (void)HwlocTopology(f.path()).read(); }, error);
}

// one_h200 with `levels` Group objects nested inside the Machine.
std::string nested(size_t levels) {
  std::string open, close;
  for (size_t i = 0; i < levels; ++i) {
    open += R"(<object type="Group" cpuset="0x0000ffff" nodeset="0x00000001">)";
    close += "</object>";
  }
  const std::string host = R"(<info name="HostName" value="fake-1x-h200"/>)";
  std::string xml = replace_first(topology_fixture_text("one_h200"), host, host + open);
  return replace_first(xml, "  </object>\n</topology>", close + "  </object>\n</topology>");
}

TEST(topology_input, xml_nesting_depth_counts_elements_and_skips_comments_quotes_and_declarations) {
  EXPECT_EQ(xml_nesting_depth("<a><b/><c><d></d></c></a>", 100), 3u);
  EXPECT_EQ(xml_nesting_depth(R"(<?xml version="1.0"?><!DOCTYPE t [<!ELEMENT t ANY>]><t x="<<a>>"/>)", 100), 1u);
  EXPECT_EQ(xml_nesting_depth("<a><!-- <b><c><d> --><![CDATA[<e><f>]]></a>", 100), 1u);
  EXPECT_EQ(xml_nesting_depth("<a x='/'><b>text > more</b></a>", 100), 2u);
  EXPECT_EQ(xml_nesting_depth("<a><a><a><a>", 2), 3u) << "stops once past the limit";
  for (const char* name : {"two_h100_nvl", "one_h200", "eight_gpu_dgx_like", "two_gpu_one_numa", "this_machine"})
    EXPECT_LT(xml_nesting_depth(topology_fixture_text(name), 100), 20u) << name;
}

// hwloc imports XML recursively: 30000 levels overflowed its stack (a segfault).
TEST(topology_input, a_topology_nested_too_deep_is_refused_before_hwloc_reads_it) {
  const TempXml ok(nested(100));
  EXPECT_EQ(HwlocTopology(ok.path()).read().gpus.size(), 1u);
  const TempXml deep(nested(1000));
  expect_error_naming([&] { (void)HwlocTopology(deep.path()); }, deep.path());
  expect_error_naming([&] { (void)HwlocTopology(deep.path()); }, "nested 1007 levels deep, more than the 256");
  const TempXml deeper(nested(30000));
  expect_error_naming([&] { (void)HwlocTopology(deeper.path()); }, "nested 30007 levels deep");
}

// hwloc loads $HWLOC_XMLFILE for "this machine": it gets the same checks.
TEST(topology_input, hwloc_xmlfile_gets_the_same_checks_as_topology) {
  const TempXml deep(nested(30000));
  ::setenv("HWLOC_XMLFILE", deep.path().c_str(), 1);
  std::string error;
  try {
    (void)HwlocTopology();
  } catch (const Error& e) {
    error = e.what();
  }
  ::unsetenv("HWLOC_XMLFILE");
  EXPECT_NE(error.find("HWLOC_XMLFILE '" + deep.path() + "'"), std::string::npos) << error;
  EXPECT_NE(error.find("nested 30007 levels deep"), std::string::npos) << error;
}

TEST(topology_input, a_topology_file_over_64_mib_is_refused_naming_the_limit) {
  const TempXml f(topology_fixture_text("one_h200"));
  std::filesystem::resize_file(f.path(), kMaxTopologyBytes + 1);  // sparse: no disk used
  expect_error_naming([&] { (void)HwlocTopology(f.path()); }, f.path());
  expect_error_naming([&] { (void)HwlocTopology(f.path()); }, "larger than the 64 MiB a topology file may have");
}

TEST(topology_input, an_empty_topology_path_is_an_error_not_this_machine) {
  expect_error_naming([] { (void)read_topology_xml("", "--topology ''"); }, "--topology '': empty path");
}

// hwloc printed "Topology does not contain any NUMA node, aborting!", then the error
// said only that hwloc could not load the file.
TEST(topology_input, a_topology_without_a_numa_node_is_named_as_one) {
  std::string xml = topology_fixture_text("one_h200");
  const size_t from = xml.find(R"(<object type="NUMANode")");
  ASSERT_NE(from, std::string::npos);
  xml.erase(from, xml.find("/>", from) + 2 - from);
  const TempXml f(xml);
  expect_error_naming([&] { (void)HwlocTopology(f.path()); }, f.path());
  expect_error_naming([&] { (void)HwlocTopology(f.path()); }, "no NUMA node");
}

// hwloc 1.x recorded a single node's memory on the Machine, with no NUMANode object;
// hwloc 2 adds the node when it loads such a file, so the check above must not refuse it.
TEST(topology_input, an_hwloc_1_topology_without_a_numa_node_object_loads_with_one_node) {
  // Every object carries its sets, as hwloc 1.x wrote them (hwloc 2 needs them).
  const auto sets = [](const char* mask) {
    const std::string m = mask;
    return " cpuset=\"" + m + "\" complete_cpuset=\"" + m + "\" online_cpuset=\"" + m + "\" allowed_cpuset=\"" + m + "\"";
  };
  const TempXml f(std::string(R"(<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE topology SYSTEM "hwloc.dtd">
<topology>
  <object type="Machine" os_index="0")") + sets("0x00000003") + R"( local_memory="1073741824">
    <object type="Package" os_index="0")" + sets("0x00000003") + R"(>
      <object type="Core" os_index="0")" + sets("0x00000001") + R"(><object type="PU" os_index="0")" +
                    sets("0x00000001") + R"(/></object>
      <object type="Core" os_index="1")" + sets("0x00000002") + R"(><object type="PU" os_index="1")" +
                    sets("0x00000002") + R"(/></object>
    </object>
  </object>
</topology>
)");
  const Topology t = HwlocTopology(f.path()).read();
  ASSERT_EQ(t.numa.size(), 1u);
  EXPECT_EQ(t.numa[0].memory_bytes, uint64_t(1) << 30);
  EXPECT_EQ(t.cores.size(), 2u);
}

// NaN, inf and 1e30 GB/s modelled the link as free (0.0 ms per verify round).
TEST(topology_input, a_non_finite_or_absurd_pci_link_speed_is_refused_naming_the_gpu) {
  for (const char* v : {"nan", "inf", "1e30", "-5"}) {
    SCOPED_TRACE(v);
    read_edited(kGpu0, replace_first(kGpu0, "63.015385", v), "GPU 0000:18:00.0 records a PCIe link speed");
  }
  read_edited(kGpu0, replace_first(kGpu0, "63.015385", "1e30"), "of 1e+30 GB/s");
}

// strtoull read "-1" as 16 EiB, took "98566144GiB" as 98566144 and overflowed x1024.
TEST(topology_input, a_cuda_memory_size_that_is_not_a_plain_number_of_kib_is_refused) {
  const std::string mem = R"(name="CUDAGlobalMemorySize" value="98566144")";
  for (const char* v : {"-1", "98566144GiB", "abc", "18014398509481985", "0", ""}) {
    SCOPED_TRACE(v);
    read_edited(mem, replace_first(mem, "98566144", v),
                "GPU 0000:18:00.0: CUDAGlobalMemorySize '" + std::string(v) + "' must be a whole number of KiB");
  }
}

TEST(topology_input, a_numa_node_recording_more_than_a_pebibyte_is_refused_naming_it) {
  read_edited(R"(gp_index="59" local_memory="274877906944")", R"(gp_index="59" local_memory="-1")",
              "NUMA node P#1 records 18446744073709551615 bytes");
}

TEST(topology_input, two_numa_nodes_with_one_os_index_are_refused_naming_it) {
  read_edited(R"(type="NUMANode" os_index="1")", R"(type="NUMANode" os_index="0")",
              "two NUMA nodes have os_index 0");
}

TEST(topology_input, two_gpus_at_one_bus_id_are_refused_naming_it) {
  read_edited(R"(pci_busid="0000:98:00.0")", R"(pci_busid="0000:18:00.0")", "two GPUs have bus id 0000:18:00.0");
}

TEST(topology_input, a_gpu_without_a_bus_id_is_refused) {
  const TempXml f(replace_first(topology_fixture_text("one_h200"), R"(pci_busid="0000:18:00.0" )", ""));
  expect_error_naming([&] { (void)HwlocTopology(f.path()).read(); }, f.path());
  expect_error_naming([&] { (void)HwlocTopology(f.path()).read(); }, "has no pci_busid");
}

// With two matrices hwloc filled one, the code asked for exactly one: NVLink was lost
// and the matrix never released.
TEST(topology_input, a_recorded_nvlink_matrix_given_twice_is_read_from_the_first) {
  std::string xml = topology_fixture_text("two_h100_nvl");
  const size_t from = xml.find("  <distances2");
  const size_t to = xml.find("</distances2>") + std::string("</distances2>\n").size();
  ASSERT_NE(from, std::string::npos);
  xml.insert(to, xml.substr(from, to - from));
  const TempXml f(xml);
  const Topology t = HwlocTopology(f.path()).read();
  EXPECT_EQ(t.link(0, 1), LinkClass::nvlink);
  EXPECT_EQ(t.links_from, "recorded NVLinkBandwidth + PCI tree");
}

}  // namespace
}  // namespace vc
