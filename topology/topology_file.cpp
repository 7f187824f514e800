// Reading a topology XML with limits (see the header).
#include "topology/topology_file.hpp"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>

#include "kernels/error.hpp"

namespace vc {

namespace {

// The position just past `end` found from `from`, or npos.
size_t past(std::string_view s, size_t from, std::string_view end) {
  const size_t e = s.find(end, from);
  return e == std::string_view::npos ? e : e + end.size();
}

// The position just past the '>' that closes a tag or declaration starting at
// `from`, quoted values skipped and, for a <!DOCTYPE ...>, its internal subset
// [...] too (`subset`); npos when unterminated.
size_t closing(std::string_view s, size_t from, bool subset) {
  int brackets = 0;
  char quote = 0;
  for (size_t i = from; i < s.size(); ++i) {
    const char c = s[i];
    if (quote != 0) {
      if (c == quote) quote = 0;
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (subset && (c == '[' || c == ']')) {
      brackets += c == '[' ? 1 : -1;
    } else if (c == '>' && brackets <= 0) {
      return i + 1;
    }
  }
  return std::string_view::npos;
}

}  // namespace

size_t xml_nesting_depth(std::string_view s, size_t stop_above) {
  size_t depth = 0, deepest = 0, i = 0;
  while ((i = s.find('<', i)) != std::string_view::npos) {
    const std::string_view at = s.substr(i);
    if (at.starts_with("<!--")) {
      i = past(s, i + 4, "-->");
    } else if (at.starts_with("<![CDATA[")) {
      i = past(s, i + 9, "]]>");
    } else if (at.starts_with("<?")) {
      i = past(s, i + 2, "?>");
    } else if (at.starts_with("<!")) {
      i = closing(s, i + 2, /*subset=*/true);
    } else if (at.starts_with("</")) {
      if (depth > 0) --depth;
      i = closing(s, i + 2, /*subset=*/false);
    } else {
      const size_t end = closing(s, i + 1, /*subset=*/false);
      deepest = std::max(deepest, depth + 1);
      if (end != std::string_view::npos && s[end - 2] != '/') ++depth;
      i = end;
    }
    if (deepest > stop_above || i == std::string_view::npos) break;
  }
  return deepest;
}

std::string read_topology_xml(const std::string& path, const std::string& what) {
  std::error_code ec;
  if (path.empty()) throw Error(what + ": empty path; expected an hwloc XML file");
  if (!std::filesystem::is_regular_file(path, ec))
    throw Error(what + ": " +
                (std::filesystem::is_directory(path, ec) ? "is a directory; expected an hwloc XML file"
                 : std::filesystem::exists(path, ec)     ? "not a regular file; expected an hwloc XML file"
                                                         : "no such file"));
  const std::string limit = std::to_string(kMaxTopologyBytes >> 20) + " MiB";
  const auto size = std::filesystem::file_size(path, ec);
  if (!ec && size > kMaxTopologyBytes)
    throw Error(what + ": " + std::to_string(size) + " bytes, larger than the " + limit +
                " a topology file may have");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(what + ": cannot open it for reading");
  std::string text;
  text.reserve(size_t(ec ? 0 : std::min<uintmax_t>(size, kMaxTopologyBytes)));
  char buf[1 << 16];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    text.append(buf, size_t(in.gcount()));
    if (text.size() > kMaxTopologyBytes)  // it grew after the size check
      throw Error(what + ": larger than the " + limit + " a topology file may have");
  }
  const size_t depth = xml_nesting_depth(text, SIZE_MAX);
  if (depth > kMaxTopologyDepth)
    throw Error(what + ": XML elements nested " + std::to_string(depth) + " levels deep, more than the " +
                std::to_string(kMaxTopologyDepth) + " a topology file may have (hwloc writes about 15)");
  // hwloc refuses a version 2 topology without one, printing its own line; name it
  // here. (Version 1 files record a single node's memory on the machine: hwloc adds
  // the node.)
  const bool v2 = text.find("hwloc2.dtd") != std::string::npos || text.find("<topology version=\"2") != std::string::npos;
  if (v2 && text.find("NUMANode") == std::string::npos)
    throw Error(what + ": no NUMA node (no object of type NUMANode); a topology needs at least one");
  return text;
}

}  // namespace vc
