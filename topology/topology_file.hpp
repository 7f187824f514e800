// Checks on a topology XML before hwloc sees it. hwloc imports XML recursively, one
// stack frame per nested element, and reads whatever size it is given: a file nested
// tens of thousands deep crashed it, a huge one was read whole. The file is read here
// once, capped in bytes and checked for its nesting depth, and hwloc loads the checked
// text from memory.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace vc {

/// Bytes a topology XML may have (a large real machine's is a few MiB).
inline constexpr size_t kMaxTopologyBytes = size_t(64) << 20;  // 64 MiB
/// Element nesting a topology XML may have (hwloc writes about 15 at most).
inline constexpr size_t kMaxTopologyDepth = 256;

/// The deepest element nesting of XML text: comments, CDATA, declarations and
/// quoted attribute values are skipped, a self-closing element counts as one level.
/// Stops scanning once the depth exceeds `stop_above`.
[[nodiscard]] size_t xml_nesting_depth(std::string_view text, size_t stop_above);

/// Reads the topology XML at `path`. Throws vc::Error starting with `what` (e.g.
/// "--topology 'x.xml'") when the file is missing, not a regular file, larger than
/// kMaxTopologyBytes, nested deeper than kMaxTopologyDepth, or a topology without a
/// NUMA node (hwloc would refuse it with a line of its own on stderr).
[[nodiscard]] std::string read_topology_xml(const std::string& path, const std::string& what);

}  // namespace vc
