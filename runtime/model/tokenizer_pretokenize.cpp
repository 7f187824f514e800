// Normalizers (Prepend, Replace, NFC) and pre-tokenizers (ByteLevel, Split,
// Metaspace, Sequence) of tokenizer.json, with Hugging Face semantics.
#include <stdexcept>

#include "runtime/model/tokenizer_internal.hpp"

namespace vc::tok {

namespace {

const char* const kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

SplitBehavior parse_behavior(const std::string& name, const std::string& source, const std::string& field) {
  if (name == "Removed") return SplitBehavior::removed;
  if (name == "Isolated") return SplitBehavior::isolated;
  if (name == "MergedWithPrevious") return SplitBehavior::merged_with_previous;
  if (name == "MergedWithNext") return SplitBehavior::merged_with_next;
  if (name == "Contiguous") return SplitBehavior::contiguous;
  fail(source, field, "unknown split behavior \"" + name + "\"");
}

void parse_pre_step(const json& j, const std::string& source, const std::string& field,
                    std::vector<PreTokenizerStep>& out) {
  const std::string type = type_of(j, source, field);
  PreTokenizerStep step;
  if (type == "Sequence") {
    const json& items = get_array(j, "pretokenizers", source, field);
    for (std::size_t i = 0; i < items.size(); ++i) {
      parse_pre_step(items[i], source, field + ".pretokenizers[" + std::to_string(i) + "]", out);
    }
    return;
  }
  if (type == "ByteLevel") {
    step.kind = PreTokenizerStep::Kind::byte_level;
    step.add_prefix_space = get_bool(j, "add_prefix_space", true, source, field);
    step.use_regex = get_bool(j, "use_regex", true, source, field);
  } else if (type == "Split") {
    step.kind = PreTokenizerStep::Kind::split;
    if (!j.contains("pattern")) fail(source, field + ".pattern", "missing");
    step.pattern = parse_pattern(j["pattern"], source, field + ".pattern");
    step.behavior = parse_behavior(get_string(j, "behavior", source, field), source, field + ".behavior");
    step.invert = get_bool(j, "invert", false, source, field);
  } else if (type == "Metaspace") {
    step.kind = PreTokenizerStep::Kind::metaspace;
    if (j.contains("replacement")) step.replacement = get_string(j, "replacement", source, field);
    if (step.replacement.empty()) fail(source, field + ".replacement", "must not be empty");
    if (j.contains("prepend_scheme") && !j["prepend_scheme"].is_null()) {
      const std::string scheme = get_string(j, "prepend_scheme", source, field);
      if (scheme == "always") {
        step.prepend = PreTokenizerStep::Prepend::always;
      } else if (scheme == "first") {
        step.prepend = PreTokenizerStep::Prepend::first;
      } else if (scheme == "never") {
        step.prepend = PreTokenizerStep::Prepend::never;
      } else {
        fail(source, field + ".prepend_scheme", "expected \"always\", \"first\" or \"never\", got \"" + scheme + "\"");
      }
    } else {
      step.prepend = get_bool(j, "add_prefix_space", true, source, field) ? PreTokenizerStep::Prepend::always
                                                                          : PreTokenizerStep::Prepend::never;
    }
    step.split = get_bool(j, "split", true, source, field);
    step.pattern = Regex::literal(step.replacement);
  } else {
    fail(source, field + ".type",
         "unsupported pre_tokenizer type \"" + type + "\" (supported: ByteLevel, Split, Metaspace, Sequence)");
  }
  out.push_back(std::move(step));
}

void parse_norm_step(const json& j, const std::string& source, const std::string& field,
                     std::vector<NormalizerStep>& out) {
  const std::string type = type_of(j, source, field);
  NormalizerStep step;
  if (type == "Sequence") {
    const json& items = get_array(j, "normalizers", source, field);
    for (std::size_t i = 0; i < items.size(); ++i) {
      parse_norm_step(items[i], source, field + ".normalizers[" + std::to_string(i) + "]", out);
    }
    return;
  }
  if (type == "Prepend") {
    step.kind = NormalizerStep::Kind::prepend;
    step.text = get_string(j, "prepend", source, field);
  } else if (type == "Replace") {
    step.kind = NormalizerStep::Kind::replace;
    if (!j.contains("pattern")) fail(source, field + ".pattern", "missing");
    step.pattern = parse_pattern(j["pattern"], source, field + ".pattern");
    step.text = get_string(j, "content", source, field);
  } else if (type == "NFC") {
    step.kind = NormalizerStep::Kind::nfc;
  } else {
    fail(source, field + ".type",
         "unsupported normalizer type \"" + type + "\" (supported: Prepend, Replace, NFC, Sequence)");
  }
  out.push_back(std::move(step));
}

// ByteLevel on one piece: optional prefix space, GPT-2 regex split, byte mapping.
void byte_level(const PreTokenizerStep& step, Piece piece, std::vector<Piece>& out) {
  static const Regex gpt2(kGpt2Pattern);
  if (step.add_prefix_space && (piece.text.empty() || piece.text.front() != ' ')) piece.text = " " + piece.text;
  std::vector<std::pair<std::size_t, std::size_t>> ranges;
  if (step.use_regex) {
    ranges = split_ranges(piece.text, gpt2, SplitBehavior::isolated, false);
  } else if (!piece.text.empty()) {
    ranges.emplace_back(0, piece.text.size());
  }
  const auto& map = byte_to_unicode();
  for (const auto& [b, e] : ranges) {
    Piece sub{std::string{}, piece.at_start && b == 0};
    for (std::size_t i = b; i < e; ++i) sub.text += map[static_cast<unsigned char>(piece.text[i])];
    out.push_back(std::move(sub));
  }
}

void metaspace(const PreTokenizerStep& step, Piece piece, std::vector<Piece>& out) {
  static const Regex space = Regex::literal(" ");
  std::string text = replace_all(piece.text, space, step.replacement);
  const bool starts = text.starts_with(step.replacement);
  if (!starts && (step.prepend == PreTokenizerStep::Prepend::always ||
                  (step.prepend == PreTokenizerStep::Prepend::first && piece.at_start))) {
    text = step.replacement + text;
  }
  if (!step.split) {
    if (!text.empty()) out.push_back({std::move(text), piece.at_start});
    return;
  }
  for (const auto& [b, e] : split_ranges(text, *step.pattern, SplitBehavior::merged_with_next, false)) {
    out.push_back({text.substr(b, e - b), piece.at_start && b == 0});
  }
}

}  // namespace

std::vector<NormalizerStep> parse_normalizer(const json& j, const std::string& source, const std::string& field) {
  std::vector<NormalizerStep> out;
  if (!j.is_null()) parse_norm_step(j, source, field, out);
  return out;
}

std::string normalize(const std::vector<NormalizerStep>& steps, std::string text) {
  for (const auto& step : steps) {
    switch (step.kind) {
      case NormalizerStep::Kind::prepend:
        if (!text.empty()) text = step.text + text;
        break;
      case NormalizerStep::Kind::replace:
        text = replace_all(text, *step.pattern, step.text);
        break;
      case NormalizerStep::Kind::nfc:
        break;  // input is taken to be NFC already
    }
  }
  return text;
}

std::vector<PreTokenizerStep> parse_pre_tokenizer(const json& j, const std::string& source,
                                                  const std::string& field) {
  std::vector<PreTokenizerStep> out;
  if (!j.is_null()) parse_pre_step(j, source, field, out);
  return out;
}

std::vector<Piece> pre_tokenize(const std::vector<PreTokenizerStep>& steps, Piece segment) {
  std::vector<Piece> pieces;
  if (!segment.text.empty()) pieces.push_back(std::move(segment));
  for (const auto& step : steps) {
    std::vector<Piece> next;
    for (auto& piece : pieces) {
      switch (step.kind) {
        case PreTokenizerStep::Kind::byte_level:
          byte_level(step, std::move(piece), next);
          break;
        case PreTokenizerStep::Kind::metaspace:
          metaspace(step, std::move(piece), next);
          break;
        case PreTokenizerStep::Kind::split:
          for (const auto& [b, e] : split_ranges(piece.text, *step.pattern, step.behavior, step.invert)) {
            next.push_back({piece.text.substr(b, e - b), piece.at_start && b == 0});
          }
          break;
      }
    }
    pieces = std::move(next);
  }
  return pieces;
}

}  // namespace vc::tok
