// Shared helpers of the runtime tests: the bundled model, loaded once.
#pragma once
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/model.hpp"
#include "runtime/model/tokenizer.hpp"

namespace vc::test {

inline std::shared_ptr<const Model> tinycode() {
  static std::shared_ptr<const Model> m = Model::load(VC_MODEL_DIR);
  return m;
}

inline std::shared_ptr<const Tokenizer> tinycode_tokenizer() {
  static auto t = std::make_shared<const Tokenizer>(
      Tokenizer::from_file(std::string(VC_MODEL_DIR) + "/tokenizer.json"));
  return t;
}

inline nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

inline const nlohmann::json& golden() {
  static nlohmann::json j = read_json(std::string(VC_TEST_DATA_DIR) + "/visible.json");
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
