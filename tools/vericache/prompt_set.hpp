// Prompt sets for benchmarks: the golden prompts shipped in tests/data, or a JSONL
// file of {"prompt": "..."} lines.
#pragma once
#include <string_view>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/error.hpp"
#include "runtime/model/bounded_input.hpp"

namespace vc::cli {

struct BenchPrompt {
  std::string name;
  std::string text;  // passed to the tokenizer as is (special tokens recognised)
};

/// The bundled code prompts (held-out Python files, 65-901 tokens).
inline std::string default_prompt_file() { return VC_DEFAULT_PROMPTS; }

/// Reads a prompt set; every error names the file (and line or case) and what was
/// expected.
inline std::vector<BenchPrompt> load_prompts(const std::string& path) {
  const std::string what = "--prompts '" + path + "'";
  const std::string text = read_file_bounded(path, kMaxModelJsonBytes, what);
  std::vector<BenchPrompt> out;
  if (path.size() >= 6 && path.substr(path.size() - 6) == ".jsonl") {
    size_t begin = 0;
    for (size_t n = 1; begin < text.size(); ++n) {
      size_t end = text.find('\n', begin);
      if (end == std::string::npos) end = text.size();
      const std::string_view line(text.data() + begin, end - begin);
      begin = end + 1;
      if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
      const std::string where = what + " line " + std::to_string(n);
      const nlohmann::json j = parse_json_bounded(line, where);
      if (!j.is_object() || !j.contains("prompt") || !j["prompt"].is_string())
        throw Error(where + ": expected an object with a string \"prompt\"");
      std::string name = "line " + std::to_string(n);
      if (j.contains("name") && j["name"].is_string()) name = j["name"].get<std::string>();
      out.push_back({name, j["prompt"].get<std::string>()});
    }
  } else {
    const nlohmann::json j = parse_json_bounded(text, what);
    if (!j.is_object() || !j.contains("cases") || !j["cases"].is_array())
      throw Error(what + ": expected JSONL (a .jsonl file) or a golden file: an object with an "
                         "array \"cases\"");
    for (size_t i = 0; i < j["cases"].size(); ++i) {
      const nlohmann::json& c = j["cases"][i];
      if (!c.is_object() || !c.contains("name") || !c["name"].is_string() ||
          !c.contains("prompt_text") || !c["prompt_text"].is_string())
        throw Error(what + ": cases[" + std::to_string(i) +
                    "]: expected an object with strings \"name\" and \"prompt_text\"");
      out.push_back({c["name"].get<std::string>(),
                     "<|begin_of_text|>" + c["prompt_text"].get<std::string>()});
    }
  }
  if (out.empty()) throw Error(what + ": holds no prompt");
  return out;
}

}  // namespace vc::cli
