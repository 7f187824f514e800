// Tokenizer facade: loads tokenizer.json, splits out added tokens, runs
// normalizer -> pre-tokenizer -> BPE for encode and the decoder chain for decode.
// encode() never adds BOS/EOS: the post_processor (e.g. TemplateProcessing) is ignored.
#include "runtime/model/tokenizer.hpp"

#include <algorithm>
#include <array>
#include <fstream>
#include <unordered_map>

#include "kernels/error.hpp"
#include "runtime/model/bounded_input.hpp"
#include "runtime/model/tokenizer_internal.hpp"

namespace vc {

using tok::json;

namespace {

/// A token of `added_tokens`, matched literally in the input.
struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool special = false;
};

/// A stretch of the input: plain text, or one added token (added_id >= 0).
struct Segment {
  std::size_t begin;
  std::size_t end;
  int32_t added_id;
};

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

// Word characters for `single_word`: ASCII alphanumerics, '_' and any non-ASCII byte.
bool is_word(char c) {
  const auto u = static_cast<unsigned char>(c);
  return u >= 0x80 || (u >= '0' && u <= '9') || (u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z') || u == '_';
}

}  // namespace

struct Tokenizer::Impl {
  std::string source;
  std::vector<AddedToken> added;
  std::unordered_map<int32_t, std::size_t> added_by_id;
  tok::StringIdMap added_by_content;
  std::array<std::vector<std::size_t>, 256> added_by_first_byte;  // longest first
  std::vector<tok::NormalizerStep> normalizer;
  std::vector<tok::PreTokenizerStep> pre_tokenizer;
  tok::BpeModel model;
  std::vector<tok::DecoderStep> decoder;

  void parse_added(const json& j);
  [[nodiscard]] std::vector<Segment> split_added(std::string_view text) const;
};

void Tokenizer::Impl::parse_added(const json& j) {
  if (j.is_null()) return;
  if (!j.is_array()) tok::fail(source, "added_tokens", "expected an array");
  for (std::size_t i = 0; i < j.size(); ++i) {
    const std::string field = "added_tokens[" + std::to_string(i) + "]";
    const json& t = j[i];
    if (!t.is_object()) tok::fail(source, field, "expected an object");
    if (!t.contains("id") || !t["id"].is_number_integer() || t["id"].get<int64_t>() < 0 ||
        t["id"].get<int64_t>() > INT32_MAX) {
      tok::fail(source, field + ".id", "missing or not a non-negative integer");
    }
    AddedToken a;
    a.id = t["id"].get<int32_t>();
    a.content = tok::get_string(t, "content", source, field);
    if (a.content.empty()) tok::fail(source, field + ".content", "must not be empty");
    a.lstrip = tok::get_bool(t, "lstrip", false, source, field);
    a.rstrip = tok::get_bool(t, "rstrip", false, source, field);
    a.single_word = tok::get_bool(t, "single_word", false, source, field);
    a.special = tok::get_bool(t, "special", false, source, field);
    added_by_id[a.id] = added.size();
    added_by_content[a.content] = a.id;
    added_by_first_byte[static_cast<unsigned char>(a.content[0])].push_back(added.size());
    added.push_back(std::move(a));
  }
  for (auto& bucket : added_by_first_byte) {
    std::stable_sort(bucket.begin(), bucket.end(),
                     [&](std::size_t x, std::size_t y) { return added[x].content.size() > added[y].content.size(); });
  }
}

std::vector<Segment> Tokenizer::Impl::split_added(std::string_view text) const {
  std::vector<Segment> out;
  std::size_t text_start = 0;  // start of the pending plain text
  std::size_t i = 0;
  const std::size_t n = text.size();
  while (i < n) {
    const AddedToken* best = nullptr;
    for (std::size_t idx : added_by_first_byte[static_cast<unsigned char>(text[i])]) {
      const AddedToken& a = added[idx];
      if (text.compare(i, a.content.size(), a.content) != 0) continue;
      const std::size_t stop = i + a.content.size();
      if (a.single_word && ((i > 0 && is_word(text[i - 1])) || (stop < n && is_word(text[stop])))) continue;
      best = &a;
      break;
    }
    if (best == nullptr) {
      ++i;
      continue;
    }
    std::size_t start = i;
    std::size_t stop = i + best->content.size();
    if (best->lstrip) {
      while (start > text_start && is_space(text[start - 1])) --start;
    }
    if (best->rstrip) {
      while (stop < n && is_space(text[stop])) ++stop;
    }
    if (start > text_start) out.push_back({text_start, start, -1});
    out.push_back({start, stop, best->id});
    i = text_start = stop;
  }
  if (text_start < n) out.push_back({text_start, n, -1});
  return out;
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_file(const std::filesystem::path& path) {
  const std::string text = read_file_bounded(path, kMaxModelJsonBytes, path.string());
  return from_json(parse_json_bounded(text, path.string(), {kMaxModelJsonBytes, 64}),
                   path.string());
}

Tokenizer Tokenizer::from_json(const nlohmann::json& j, const std::string& source) {
  auto impl = std::make_unique<Impl>();
  impl->source = source;
  if (!j.is_object()) throw Error(source + ": expected a JSON object at the top level");
  try {
    if (!j.contains("model") || j["model"].is_null()) tok::fail(source, "model", "missing");
    impl->model = tok::BpeModel::parse(j["model"], source);
    impl->parse_added(j.value("added_tokens", json()));
    impl->normalizer = tok::parse_normalizer(j.value("normalizer", json()), source, "normalizer");
    impl->pre_tokenizer = tok::parse_pre_tokenizer(j.value("pre_tokenizer", json()), source, "pre_tokenizer");
    impl->decoder = tok::parse_decoder(j.value("decoder", json()), source, "decoder");
  } catch (const json::exception& e) {
    throw Error(source + ": malformed tokenizer.json: " + e.what());
  }
  // Byte-fallback models always decode <0xNN> tokens to bytes, even when the
  // decoder chain leaves out ByteFallback.
  const bool has_fallback = std::any_of(impl->decoder.begin(), impl->decoder.end(), [](const auto& s) {
    return s.kind == tok::DecoderStep::Kind::byte_fallback;
  });
  if (impl->model.byte_fallback() && !has_fallback) {
    tok::DecoderStep step;
    step.kind = tok::DecoderStep::Kind::byte_fallback;
    impl->decoder.insert(impl->decoder.begin(), std::move(step));
  }
  return Tokenizer(std::move(impl));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  for (const Segment& seg : impl_->split_added(text)) {
    if (seg.added_id >= 0) {
      out.push_back(seg.added_id);
      continue;
    }
    std::string normalized = tok::normalize(impl_->normalizer, std::string(text.substr(seg.begin, seg.end - seg.begin)));
    for (const tok::Piece& piece : tok::pre_tokenize(impl_->pre_tokenizer, {std::move(normalized), seg.begin == 0})) {
      impl_->model.encode_word(piece.text, out);
    }
  }
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::vector<tok::DecodeToken> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (auto it = impl_->added_by_id.find(id); it != impl_->added_by_id.end()) {
      const AddedToken& a = impl_->added[it->second];
      if (!(skip_special && a.special)) tokens.push_back({a.content, true});
    } else if (const std::string* t = impl_->model.token_of(id)) {
      tokens.push_back({*t, false});
    } else {
      // An id the tokenizer lacks (a model whose vocabulary is larger than its
      // tokenizer's) is shown, not dropped: U+FFFD, the Unicode replacement character.
      tokens.push_back({std::string(kUnknownTokenText), true});
    }
  }
  return tok::run_decoders(impl_->decoder, std::move(tokens));
}

int Tokenizer::vocab_size() const {
  int n = impl_->model.size();
  for (const AddedToken& a : impl_->added) n = std::max(n, a.id + 1);
  return n;
}

std::optional<int32_t> Tokenizer::token_id(std::string_view token) const {
  if (auto it = impl_->added_by_content.find(token); it != impl_->added_by_content.end()) return it->second;
  return impl_->model.id_of(token);
}

}  // namespace vc
