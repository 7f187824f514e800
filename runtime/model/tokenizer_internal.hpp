// Private pieces of the tokenizer.json tokenizer, shared by the tokenizer_*.cpp
// files: PCRE2 regex, normalizers, pre-tokenizers, the BPE model and decoders.
// Everything here follows the Hugging Face `tokenizers` semantics.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace vc::tok {

using json = nlohmann::json;

/// Throws vc::Error "<source>: field '<field>': <what>".
[[noreturn]] void fail(const std::string& source, const std::string& field, const std::string& what);

/// The "type" string of a tokenizer.json component object.
[[nodiscard]] inline std::string type_of(const json& j, const std::string& source, const std::string& field) {
  if (!j.is_object()) fail(source, field, "expected an object");
  if (!j.contains("type") || !j["type"].is_string()) fail(source, field + ".type", "missing or not a string");
  return j["type"].get<std::string>();
}

/// j[key] as a bool; `fallback` when absent or null.
[[nodiscard]] inline bool get_bool(const json& j, const char* key, bool fallback, const std::string& source,
                                   const std::string& field) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_boolean()) fail(source, field + "." + key, "expected true or false");
  return j[key].get<bool>();
}

/// j[key] as a string; throws when absent.
[[nodiscard]] inline std::string get_string(const json& j, const char* key, const std::string& source,
                                            const std::string& field) {
  if (!j.contains(key) || !j[key].is_string()) fail(source, field + "." + key, "missing or not a string");
  return j[key].get<std::string>();
}

/// j[key] as an array; throws when absent.
[[nodiscard]] inline const json& get_array(const json& j, const char* key, const std::string& source,
                                           const std::string& field) {
  if (!j.contains(key) || !j[key].is_array()) fail(source, field + "." + key, "missing or not an array");
  return j[key];
}

/// Byte length of the UTF-8 character starting at text[i]; 1 for an invalid byte.
[[nodiscard]] std::size_t utf8_len(std::string_view text, std::size_t i);

/// Hash that lets unordered maps keyed by std::string be searched with string_view.
struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
using StringIdMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

/// A compiled PCRE2 pattern (UTF + UCP, so \p{L}, \s and lookahead match like
/// the Oniguruma regexes of Hugging Face). Shareable between threads.
class Regex {
 public:
  /// Compiles `pattern`; throws std::invalid_argument with PCRE2's message.
  explicit Regex(const std::string& pattern);
  /// Regex that matches `literal` exactly.
  [[nodiscard]] static Regex literal(std::string_view literal);
  /// Byte ranges [first, second) of the successive non-overlapping matches.
  [[nodiscard]] std::vector<std::pair<std::size_t, std::size_t>> find_all(std::string_view text) const;

 private:
  explicit Regex(std::shared_ptr<void> code) : code_(std::move(code)) {}
  std::shared_ptr<void> code_;  // pcre2_code_8
};

/// `text` with every match of `re` replaced by `content`.
[[nodiscard]] std::string replace_all(std::string_view text, const Regex& re, std::string_view content);

/// Reads a {"String": s} or {"Regex": r} pattern object; errors name `field`.
[[nodiscard]] Regex parse_pattern(const json& j, const std::string& source, const std::string& field);

/// SplitDelimiterBehavior of Hugging Face.
enum class SplitBehavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };

/// Byte ranges of the pieces of `text` split on `re` with `behavior` (empty pieces dropped).
[[nodiscard]] std::vector<std::pair<std::size_t, std::size_t>> split_ranges(
    std::string_view text, const Regex& re, SplitBehavior behavior, bool invert);

/// GPT-2's byte -> printable character map (UTF-8 of each of the 256 characters).
[[nodiscard]] const std::vector<std::string>& byte_to_unicode();

// ---- normalizers -------------------------------------------------------------

/// One normalizer step: Prepend, Replace, or NFC (NFC is applied as identity:
/// input text is assumed to be NFC already).
struct NormalizerStep {
  enum class Kind { prepend, replace, nfc };
  Kind kind = Kind::nfc;
  std::string text;                 // prepend text / replace content
  std::optional<Regex> pattern;     // replace pattern
};

/// Reads `normalizer` (null, a step, or a Sequence); unsupported types throw.
[[nodiscard]] std::vector<NormalizerStep> parse_normalizer(const json& j, const std::string& source,
                                                           const std::string& field);
/// Applies the steps in order.
[[nodiscard]] std::string normalize(const std::vector<NormalizerStep>& steps, std::string text);

// ---- pre-tokenizers ----------------------------------------------------------

/// One pre-tokenizer step: ByteLevel, Split or Metaspace.
struct PreTokenizerStep {
  enum class Kind { byte_level, split, metaspace };
  enum class Prepend { always, first, never };
  Kind kind = Kind::byte_level;
  bool add_prefix_space = false;  // ByteLevel
  bool use_regex = true;          // ByteLevel
  std::optional<Regex> pattern;   // Split
  SplitBehavior behavior = SplitBehavior::isolated;
  bool invert = false;
  std::string replacement = "\xE2\x96\x81";  // Metaspace "▁"
  Prepend prepend = Prepend::always;
  bool split = true;              // Metaspace
};

/// A piece of text between pre-tokenizer steps; `at_start` when it begins at
/// offset 0 of the whole input (Metaspace prepend_scheme "first").
struct Piece {
  std::string text;
  bool at_start = false;
};

/// Reads `pre_tokenizer` (null, a step, or a Sequence); unsupported types throw.
[[nodiscard]] std::vector<PreTokenizerStep> parse_pre_tokenizer(const json& j, const std::string& source,
                                                                const std::string& field);
/// Runs the steps over one normalized segment.
[[nodiscard]] std::vector<Piece> pre_tokenize(const std::vector<PreTokenizerStep>& steps, Piece segment);

// ---- BPE model ---------------------------------------------------------------

/// The BPE model: vocab, merge ranks, byte fallback, unk and ignore_merges.
class BpeModel {
 public:
  /// Reads `model`; errors name the field (e.g. "model.merges[3]").
  [[nodiscard]] static BpeModel parse(const json& model, const std::string& source);
  /// Appends the ids of one pre-token.
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;
  [[nodiscard]] std::optional<int32_t> id_of(std::string_view token) const;
  /// Token text of `id`, nullptr when the vocab has none.
  [[nodiscard]] const std::string* token_of(int32_t id) const;
  /// Largest id + 1.
  [[nodiscard]] int size() const { return static_cast<int>(id_to_token_.size()); }
  [[nodiscard]] bool byte_fallback() const { return byte_fallback_; }

 private:
  struct Merge {
    int32_t rank;
    int32_t new_id;
  };
  [[nodiscard]] const Merge* find_merge(int32_t a, int32_t b) const;

  StringIdMap vocab_;
  std::vector<std::optional<std::string>> id_to_token_;
  std::unordered_map<uint64_t, Merge> merges_;
  std::optional<int32_t> unk_id_;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  std::vector<int32_t> byte_ids_;  // id of "<0xNN>" per byte, -1 when absent
};

// ---- decoders ----------------------------------------------------------------

/// One decoder step.
struct DecoderStep {
  enum class Kind { byte_level, metaspace, replace, byte_fallback, fuse, strip };
  Kind kind = Kind::byte_level;
  std::string replacement = "\xE2\x96\x81";  // Metaspace
  bool strip_first = true;                    // Metaspace: drop ▁ of the first token
  std::optional<Regex> pattern;               // Replace
  std::string content;                        // Replace content / Strip character
  int start = 0;                              // Strip
  int stop = 0;                               // Strip
};

/// A token on its way through the decoders; added tokens bypass byte mapping.
struct DecodeToken {
  std::string text;
  bool added = false;
};

/// Reads `decoder` (null, a step, or a Sequence); unsupported types throw.
[[nodiscard]] std::vector<DecoderStep> parse_decoder(const json& j, const std::string& source,
                                                     const std::string& field);
/// Runs the steps and concatenates the result (tokens joined with " " when
/// there are no steps, as Hugging Face does).
[[nodiscard]] std::string run_decoders(const std::vector<DecoderStep>& steps, std::vector<DecodeToken> tokens);

}  // namespace vc::tok
