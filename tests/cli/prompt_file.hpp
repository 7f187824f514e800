// A prompt written to a fresh temporary file (for --prompt-file), removed on
// destruction; shared by the remote prefix cache's CLI tests.
#pragma once
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

namespace vc::test {

struct PromptFile {
  std::string path;
  explicit PromptFile(const std::string& text) {
    char tmpl[] = "/tmp/vc-prompt-XXXXXX";
    const int fd = mkstemp(tmpl);
    close(fd);
    path = tmpl;
    std::ofstream(path) << text;
  }
  ~PromptFile() { unlink(path.c_str()); }
  PromptFile(const PromptFile&) = delete;
  PromptFile& operator=(const PromptFile&) = delete;
};

}  // namespace vc::test
