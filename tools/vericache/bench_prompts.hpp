// Benchmark prompts built from the bundled code prompts: a file as it is or shaped
// as an editing request, and prompts of an exact token length made by concatenating
// files.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/model/tokenizer.hpp"

namespace vc::cli {

/// "plain": `text` as it is. "edit": `text`, then an instruction to write the file
/// out again and the file's first three lines, as a code-editing request does; the
/// answer repeats the context, which is what the n-gram level is for.
[[nodiscard]] std::string shape_prompt(const std::string& text, const std::string& kind);

/// `n` prompt tokens: the bundled code prompts, tokenized and concatenated from the
/// one `seed` picks, cycling. "edit": the same files cut short so that the edit
/// request for the first of them (shape_prompt's suffix) ends the prompt at `n`
/// tokens; "plain": the files alone. Throws vc::Error when `n` cannot hold the suffix.
[[nodiscard]] std::vector<int32_t> code_prompt(const Tokenizer& tok, size_t n, uint32_t seed,
                                               const std::string& kind = "plain");

}  // namespace vc::cli
