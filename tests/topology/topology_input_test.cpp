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

}  // namespace
}  // namespace vc
