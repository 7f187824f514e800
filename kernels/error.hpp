// The project's error type: a message that names what was wrong and where.
#pragma once
#include <stdexcept>
#include <string>

namespace vc {

/// Thrown for bad input (malformed file, bad request, unsupported setting). The
/// message names the file, the field or tensor, and what was expected.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace vc
