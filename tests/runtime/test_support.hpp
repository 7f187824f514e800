// Shared helpers of the runtime tests: the bundled model, loaded once.
#pragma once
#include <cstdlib>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/model.hpp"
#include "runtime/model/tokenizer.hpp"

namespace vc::test {

/// The bundled model's directory and the test data's: where the build put them, or
/// VC_TEST_MODEL_DIR / VC_TEST_DATA_DIR (a prebuilt test binary run in another
/// checkout: tools/gpu-check.sh).
inline std::string model_dir() {
  const char* e = std::getenv("VC_TEST_MODEL_DIR");
  return e != nullptr && *e != '\0' ? e : VC_MODEL_DIR;
}
inline std::string data_dir() {
  const char* e = std::getenv("VC_TEST_DATA_DIR");
  return e != nullptr && *e != '\0' ? e : VC_TEST_DATA_DIR;
}

inline std::shared_ptr<const Model> tinycode() {
  static std::shared_ptr<const Model> m = Model::load(model_dir());
  return m;
}

inline std::shared_ptr<const Tokenizer> tinycode_tokenizer() {
  static auto t = std::make_shared<const Tokenizer>(Tokenizer::from_file(model_dir() + "/tokenizer.json"));
  return t;
}

inline nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

inline const nlohmann::json& golden() {
  static nlohmann::json j = read_json(data_dir() + "/visible.json");
  return j;
}

/// Random token ids in [0, vocab - 2), starting with `bos` when it is >= 0.
inline std::vector<int32_t> random_tokens(std::mt19937& rng, size_t n, int vocab, int bos) {
  std::uniform_int_distribution<int> d(0, vocab - 3);
  std::vector<int32_t> ids(n);
  for (auto& t : ids) t = d(rng);
  if (bos >= 0 && n > 0) ids[0] = bos;
  return ids;
}

}  // namespace vc::test
