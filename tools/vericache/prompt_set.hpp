// Prompt sets for benchmarks: the golden prompts shipped in tests/data, or a JSONL
// file of {"prompt": "..."} lines.
#pragma once
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/error.hpp"

namespace vc::cli {

struct BenchPrompt {
  std::string name;
  std::string text;  // passed to the tokenizer as is (special tokens recognised)
};

/// The bundled code prompts (held-out Python files, 65-901 tokens).
inline std::string default_prompt_file() { return VC_DEFAULT_PROMPTS; }

inline std::vector<BenchPrompt> load_prompts(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error("prompts: cannot open '" + path + "'");
  std::vector<BenchPrompt> out;
  if (path.size() >= 6 && path.substr(path.size() - 6) == ".jsonl") {
    std::string line;
    for (size_t n = 1; std::getline(in, line); ++n) {
      if (line.empty()) continue;
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(line);
      } catch (const std::exception& e) {
        throw Error("prompts: " + path + ":" + std::to_string(n) + " is not JSON: " + e.what());
      }
      if (!j.contains("prompt") || !j["prompt"].is_string())
        throw Error("prompts: " + path + ":" + std::to_string(n) + " has no string \"prompt\"");
      out.push_back({j.value("name", "line " + std::to_string(n)), j["prompt"]});
    }
  } else {
    const auto j = nlohmann::json::parse(in, nullptr, false);
    if (j.is_discarded() || !j.contains("cases"))
      throw Error("prompts: " + path + " is neither JSONL nor a golden file with \"cases\"");
    for (const auto& c : j["cases"])
      out.push_back({c["name"], "<|begin_of_text|>" + c["prompt_text"].get<std::string>()});
  }
  if (out.empty()) throw Error("prompts: " + path + " holds no prompt");
  return out;
}

}  // namespace vc::cli
