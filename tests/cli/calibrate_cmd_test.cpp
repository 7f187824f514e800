// `vericache calibrate kvzap`: writes a surrogate that `generate --compressor kvzap`
// then uses (output equal to full decoding), prints R^2 per layer, and refuses bad
// input with one line naming it.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/cli/cli_support.hpp"

namespace vc {
namespace {

namespace fs = std::filesystem;

// The bundled model copied without its kvzap.safetensors.
struct ModelCopy {
  fs::path dir;
  ModelCopy() {
    dir = fs::temp_directory_path() / ("vc-calibrate-test-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    for (const char* f : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"})
      fs::copy(fs::path(VC_MODEL_DIR) / f, dir / f);
  }
  ~ModelCopy() { fs::remove_all(dir); }
};

TEST(calibrate_cmd, writes_a_surrogate_that_generate_uses_and_prints_r2_per_layer) {
  const ModelCopy m;
  const std::string model = " --model " + m.dir.string();
  const std::string gen_args = "generate" + model +
                               " --prompt 'def area(r):' --max-tokens 24 --ignore-eos --json";
  // Without the file, a kvzap request fails before any work, naming the file.
  auto r = test::run_vericache(gen_args + " --mode vericache --compressor kvzap", true);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("no surrogate file " + (m.dir / "kvzap.safetensors").string()),
            std::string::npos) << r.out;

  const fs::path data = m.dir / "text.py";
  std::ofstream(data) << "def mean(xs):\n    total = 0\n    for x in xs:\n        total += x\n"
                         "    return total / len(xs)\n\n\nclass Point:\n    def __init__(self, x, y):\n"
                         "        self.x = x\n        self.y = y\n";
  r = test::run_vericache("calibrate kvzap" + model + " --data " + data.string() +
                              " --generate 2 --max-tokens 96 --form mlp --units 8 --epochs 4",
                          true);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("mlp surrogate, 3 texts"), std::string::npos) << r.out;
  for (const char* layer : {"    0  ", "    5  "}) EXPECT_NE(r.out.find(layer), std::string::npos) << r.out;
  ASSERT_TRUE(fs::exists(m.dir / "kvzap.safetensors"));

  const auto full = test::run_vericache(gen_args + " --mode full", false);
  ASSERT_EQ(full.code, 0);
  for (const char* sel : {"--ratio 4", "--threshold 1e30 --keep-recent 2"}) {
    const auto v = test::run_vericache(gen_args + " --mode vericache --compressor kvzap --draft 4 " + sel,
                                       false);
    ASSERT_EQ(v.code, 0) << sel;
    const auto jf = nlohmann::json::parse(full.out), jv = nlohmann::json::parse(v.out);
    EXPECT_EQ(jf["output_ids"], jv["output_ids"]) << sel;
    EXPECT_GT(jv["stats"]["compression"]["achieved_ratio"].get<double>(), 1.0) << sel;
  }
}

TEST(calibrate_cmd, bad_input_is_one_line_naming_what_was_wrong) {
  const ModelCopy m;
  const std::string model = " --model " + m.dir.string();
  auto r = test::run_vericache("calibrate kvzap" + model + " --data /nonexistent/x.txt", true);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("--data '/nonexistent/x.txt'"), std::string::npos) << r.out;
  r = test::run_vericache("calibrate kvzap" + model, true);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("no text (give --data FILES or --generate N)"), std::string::npos) << r.out;
  r = test::run_vericache("calibrate kvzap" + model + " --generate 1 --form cubic", true);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("--form"), std::string::npos) << r.out;
  r = test::run_vericache("calibrate kvzap" + model + " --generate 1 --lambda nan", true);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("--lambda"), std::string::npos) << r.out;
  // An --out that cannot be written is refused before the fit runs.
  r = test::run_vericache("calibrate kvzap" + model + " --generate 1 --out /nonexistent/dir/k.safetensors", true);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("--out '/nonexistent/dir/k.safetensors': directory '/nonexistent/dir' does not exist"),
            std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("R^2"), std::string::npos) << "no fit ran: " << r.out;
  EXPECT_FALSE(fs::exists(m.dir / "kvzap.safetensors"));
}

}  // namespace
}  // namespace vc
