// Tests' check that a call fails with the project's error and that its message
// names what was wrong.
#pragma once
#include <gtest/gtest.h>

#include <string>

#include "kernels/error.hpp"

namespace vc::test {

/// `f()` must throw vc::Error whose message contains `what`.
template <class F>
void expect_error_naming(F&& f, const std::string& what) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one naming '" << what << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

}  // namespace vc::test
