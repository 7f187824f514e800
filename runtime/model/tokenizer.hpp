// Hugging Face tokenizer.json: byte-level BPE (GPT-2, Llama-3, Qwen) and
// Metaspace / byte-fallback BPE (Llama-2, Mistral).
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace vc {

class Tokenizer {
 public:
  /// Reads a tokenizer.json; errors name the file and the field.
  /// What decode() writes for an id the tokenizer has no token for: U+FFFD.
  static constexpr std::string_view kUnknownTokenText = "\xEF\xBF\xBD";

  [[nodiscard]] static Tokenizer from_file(const std::filesystem::path& path);
  [[nodiscard]] static Tokenizer from_json(const nlohmann::json& j, const std::string& source);
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  /// Token ids of `text`; no BOS is added. Added/special tokens written literally in
  /// the text are recognised as single tokens, as Hugging Face does.
  [[nodiscard]] std::vector<int32_t> encode(std::string_view text) const;
  /// Text of `ids` (bytes that do not form complete UTF-8 are kept as they are; an
  /// id with no token decodes to kUnknownTokenText, so nothing vanishes silently).
  [[nodiscard]] std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;
  [[nodiscard]] int vocab_size() const;
  [[nodiscard]] std::optional<int32_t> token_id(std::string_view token) const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace vc
