// Bounded reads and depth-checked JSON parsing (see the header).
#include "runtime/model/bounded_input.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "kernels/error.hpp"

namespace vc {

namespace {

std::string mib(size_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

}  // namespace

void require_readable_file(const std::filesystem::path& path, const std::string& what) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (ec || st.type() == std::filesystem::file_type::not_found)
    throw Error(what + ": cannot open: no such file");
  if (st.type() == std::filesystem::file_type::directory)
    throw Error(what + ": is a directory, expected a file");
}

std::string read_file_bounded(const std::filesystem::path& path, size_t max_bytes,
                              const std::string& what) {
  require_readable_file(path, what);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(what + ": cannot open: " + std::strerror(errno));
  std::string out;
  char buf[1 << 16];
  while (in) {
    in.read(buf, sizeof buf);
    const auto n = size_t(in.gcount());
    if (out.size() + n > max_bytes)
      throw Error(what + ": larger than the limit of " + mib(max_bytes) +
                  " (is it the right file?)");
    out.append(buf, n);
  }
  if (in.bad()) throw Error(what + ": read failed");
  return out;
}

std::optional<std::string> read_line_bounded(std::istream& in, size_t max_bytes,
                                             size_t line_number, const std::string& what) {
  std::string line;
  std::streambuf* sb = in.rdbuf();
  bool any = false;
  for (;;) {
    const int c = sb->sbumpc();
    if (c == std::char_traits<char>::eof()) {
      in.setstate(std::ios::eofbit);
      break;
    }
    any = true;
    if (c == '\n') break;
    if (line.size() >= max_bytes)
      throw Error(what + ": line " + std::to_string(line_number) + " is longer than the limit of " +
                  mib(max_bytes));
    line.push_back(char(c));
  }
  if (!any) return std::nullopt;
  if (!line.empty() && line.back() == '\r') line.pop_back();
  return line;
}

size_t json_nesting_depth(std::string_view text, size_t stop_above) {
  size_t depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > deepest) deepest = depth;
      if (deepest > stop_above) return deepest;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

nlohmann::json parse_json_bounded(std::string_view text, const std::string& source,
                                  const InputLimits& limits) {
  const std::string where = source.empty() ? "" : source + ": ";
  if (text.size() > limits.max_bytes)
    throw Error(where + "larger than the limit of " + mib(limits.max_bytes));
  if (json_nesting_depth(text, limits.max_depth) > limits.max_depth)
    throw Error(where + "JSON nested deeper than " + std::to_string(limits.max_depth) +
                " levels");
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(where + "not valid JSON: " + e.what());
  }
}

}  // namespace vc
