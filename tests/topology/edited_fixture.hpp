// A recorded topology fixture with string edits applied, written to a temp file that
// is removed with the object: how the tests build a bad topology XML without
// committing one.
#pragma once
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

namespace vc::test {

/// The text of tests/data/topologies/`name`.xml.
inline std::string topology_fixture_text(const std::string& name) {
  std::ifstream in(std::string(VC_TEST_DATA_DIR) + "/topologies/" + name + ".xml");
  if (!in) throw std::runtime_error("no topology fixture " + name);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

/// `text` with its first `from` replaced by `to`; throws when `from` is absent, so a
/// fixture that changes cannot silently turn a test into a no-op.
inline std::string replace_first(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  if (at == std::string::npos) throw std::runtime_error("fixture edit: '" + from + "' not found");
  return text.replace(at, from.size(), to);
}

/// A temp file holding `text`, removed on destruction.
class TempXml {
 public:
  explicit TempXml(const std::string& text) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "vc_topo_XXXXXX.xml").string();
    const int fd = ::mkstemps(tmpl.data(), 4);
    if (fd < 0) throw std::runtime_error("mkstemps failed");
    ::close(fd);
    path_ = tmpl;
    std::ofstream(path_, std::ios::binary) << text;
  }
  ~TempXml() {
    std::error_code ec;
    std::filesystem::remove(path_, ec);
  }
  TempXml(const TempXml&) = delete;
  TempXml& operator=(const TempXml&) = delete;
  [[nodiscard]] const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace vc::test
