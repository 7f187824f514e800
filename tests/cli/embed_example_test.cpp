// tools/examples/embed_example.cpp, the embedding example, runs to completion:
// three results (one cancelled) and the engine's figures.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <string>

namespace {

#ifdef VC_EMBED_EXAMPLE_PATH

std::string run_example(const std::string& args, int& code) {
  const std::string cmd = std::string(VC_EMBED_EXAMPLE_PATH) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  code = WEXITSTATUS(pclose(p));
  return out;
}

TEST(embed_example, streams_three_requests_cancels_one_and_prints_stats) {
  int code = -1;
  const std::string out = run_example(std::string("'") + VC_MODEL_DIR + "'", code);
  ASSERT_EQ(code, 0) << out;
  for (const char* want : {"result 1 (id", "result 2 (id", "result 3 (id", "finish_reason length",
                           "finish_reason cancelled", "  [1 id", "  [3 id", "engine: 3 submitted",
                           "busy"})
    EXPECT_NE(out.find(want), std::string::npos) << want << "\n" << out;
}

TEST(embed_example, a_missing_model_directory_exits_with_an_error) {
  int code = -1;
  const std::string out = run_example("/nonexistent/model", code);
  EXPECT_EQ(code, 1);
  EXPECT_NE(out.find("/nonexistent/model"), std::string::npos) << out;
}

#else

TEST(embed_example, not_built) { GTEST_SKIP() << "vericache_embed_example is not built"; }

#endif

}  // namespace
