// The benchmark prompts of bench_prompts.hpp.
#include "tools/vericache/bench_prompts.hpp"

#include "kernels/error.hpp"
#include "tools/vericache/prompt_set.hpp"

namespace vc::cli {

namespace {

constexpr const char* kEditRequest = "\n\n# The same file again, with typos fixed:\n";
constexpr const char* kBos = "<|begin_of_text|>";

// The first three lines of a prompt file (without its BOS marker).
std::string first_lines(const std::string& text) {
  const std::string body = text.rfind(kBos, 0) == 0 ? text.substr(std::string(kBos).size()) : text;
  size_t cut = 0;
  for (int line = 0; line < 3 && cut != std::string::npos; ++line) cut = body.find('\n', cut + 1);
  return body.substr(0, cut == std::string::npos ? body.size() : cut + 1);
}

}  // namespace

std::string shape_prompt(const std::string& text, const std::string& kind) {
  if (kind == "plain") return text;
  if (kind != "edit") throw Error("prompt kind: expected plain or edit, got '" + kind + "'");
  return text + kEditRequest + first_lines(text);
}

std::vector<int32_t> code_prompt(const Tokenizer& tok, size_t n, uint32_t seed, const std::string& kind) {
  if (kind != "plain" && kind != "edit")
    throw Error("prompt kind: expected plain or edit, got '" + kind + "'");
  const std::vector<BenchPrompt> set = load_prompts(default_prompt_file());
  const size_t first = seed % set.size();
  std::vector<int32_t> suffix;
  if (kind == "edit") {
    suffix = tok.encode(kEditRequest + first_lines(set[first].text));
    if (suffix.size() >= n)
      throw Error("prompt of " + std::to_string(n) + " tokens: too short for an edit request (" +
                  std::to_string(suffix.size() + 1) + " tokens at least)");
  }
  std::vector<int32_t> out;
  for (size_t i = first; out.size() < n - suffix.size(); i = (i + 1) % set.size()) {
    const std::vector<int32_t> ids = tok.encode(set[i].text);
    out.insert(out.end(), ids.begin(), ids.end());
  }
  out.resize(n - suffix.size());
  out.insert(out.end(), suffix.begin(), suffix.end());
  return out;
}

}  // namespace vc::cli
