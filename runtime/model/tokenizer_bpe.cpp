// The BPE model of tokenizer.json: vocab and merge ranks, merging a pre-token
// lowest rank first (leftmost among equals), byte fallback, unk and ignore_merges.
#include <cstdio>
#include <queue>

#include "runtime/model/tokenizer_internal.hpp"

namespace vc::tok {

namespace {

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

// "a b" or ["a", "b"] -> the two halves; false when malformed.
bool split_merge(const json& m, std::string& a, std::string& b) {
  if (m.is_string()) {
    const std::string s = m.get<std::string>();
    const std::size_t sp = s.find(' ');
    if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) return false;
    a = s.substr(0, sp);
    b = s.substr(sp + 1);
    return true;
  }
  if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
    a = m[0].get<std::string>();
    b = m[1].get<std::string>();
    return true;
  }
  return false;
}

}  // namespace

namespace {
/// Real vocabularies stay far below it (Llama 3: 128,256; Gemma: 262,144); the
/// id-to-token table it allows is at most 128 MiB of empty strings.
constexpr int64_t kMaxVocabId = (int64_t(1) << 22) - 1;
}  // namespace

BpeModel BpeModel::parse(const json& model, const std::string& source) {
  BpeModel bpe;
  if (!model.is_object()) fail(source, "model", "expected an object");
  if (model.contains("type")) {
    const std::string type = type_of(model, source, "model");
    if (type != "BPE") fail(source, "model.type", "unsupported model type \"" + type + "\" (only \"BPE\" is supported)");
  } else if (!model.contains("merges")) {
    fail(source, "model.type", "missing");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(key) && !model[key].is_null() && model[key] != "") {
      fail(source, std::string("model.") + key, "is not supported (expected null)");
    }
  }

  if (!model.contains("vocab") || !model["vocab"].is_object()) fail(source, "model.vocab", "missing or not an object");
  for (const auto& [token, id] : model["vocab"].items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0) {
      fail(source, "model.vocab", "id of token \"" + token + "\" is not a non-negative integer");
    }
    // The id-to-token table is as long as the largest id: a stray huge id would
    // allocate gigabytes for a small file.
    if (id.get<int64_t>() > kMaxVocabId) {
      fail(source, "model.vocab", "id of token \"" + token + "\" is " + std::to_string(id.get<int64_t>()) +
                                      ", past the largest vocabulary id read (" + std::to_string(kMaxVocabId) + ")");
    }
    const auto i = id.get<int32_t>();
    bpe.vocab_.emplace(token, i);
    if (static_cast<std::size_t>(i) >= bpe.id_to_token_.size()) bpe.id_to_token_.resize(i + 1);
    bpe.id_to_token_[i] = token;
  }

  bpe.byte_fallback_ = get_bool(model, "byte_fallback", false, source, "model");
  bpe.fuse_unk_ = get_bool(model, "fuse_unk", false, source, "model");
  bpe.ignore_merges_ = get_bool(model, "ignore_merges", false, source, "model");
  if (model.contains("unk_token") && !model["unk_token"].is_null()) {
    bpe.unk_id_ = bpe.id_of(get_string(model, "unk_token", source, "model"));
  }
  bpe.byte_ids_.assign(256, -1);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    if (auto id = bpe.id_of(name)) bpe.byte_ids_[b] = *id;
  }

  if (!model.contains("merges") || !model["merges"].is_array()) fail(source, "model.merges", "missing or not an array");
  const json& merges = model["merges"];
  bpe.merges_.reserve(merges.size());
  std::string a;
  std::string b;
  for (std::size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string field = "model.merges[" + std::to_string(rank) + "]";
    if (!split_merge(merges[rank], a, b)) fail(source, field, "expected \"a b\" or [\"a\", \"b\"]");
    auto need = [&](const std::string& token) {
      auto id = bpe.id_of(token);
      if (!id) fail(source, field, "merge \"" + a + " " + b + "\" names token \"" + token + "\" that is not in model.vocab");
      return *id;
    };
    const int32_t ia = need(a);
    const int32_t ib = need(b);
    const int32_t merged = need(a + b);
    bpe.merges_.try_emplace(pair_key(ia, ib), Merge{static_cast<int32_t>(rank), merged});
  }
  return bpe;
}

std::optional<int32_t> BpeModel::id_of(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::token_of(int32_t id) const {
  if (id < 0 || static_cast<std::size_t>(id) >= id_to_token_.size() || !id_to_token_[id]) return nullptr;
  return &*id_to_token_[id];
}

const BpeModel::Merge* BpeModel::find_merge(int32_t a, int32_t b) const {
  auto it = merges_.find(pair_key(a, b));
  return it == merges_.end() ? nullptr : &it->second;
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (auto id = id_of(word)) {
      out.push_back(*id);
      return;
    }
  }
  // Initial symbols: one per character, else its <0xNN> bytes, else unk.
  struct Symbol {
    int32_t id;
    int prev;
    int next;
    bool alive;
  };
  std::vector<Symbol> syms;
  syms.reserve(word.size());
  bool last_unk = false;
  for (std::size_t i = 0; i < word.size();) {
    const std::size_t n = utf8_len(word, i);
    const std::string_view ch = word.substr(i, n);
    i += n;
    if (auto id = id_of(ch)) {
      syms.push_back({*id, 0, 0, true});
      last_unk = false;
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (char c : ch) all = all && byte_ids_[static_cast<unsigned char>(c)] >= 0;
      if (all) {
        for (char c : ch) syms.push_back({byte_ids_[static_cast<unsigned char>(c)], 0, 0, true});
        last_unk = false;
        continue;
      }
    }
    if (unk_id_) {
      if (!(fuse_unk_ && last_unk)) syms.push_back({*unk_id_, 0, 0, true});
      last_unk = true;
    }
  }
  const int n = static_cast<int>(syms.size());
  for (int i = 0; i < n; ++i) {
    syms[i].prev = i - 1;
    syms[i].next = i + 1 < n ? i + 1 : -1;
  }

  // Merge lowest rank first; among equal ranks the leftmost (smallest index).
  struct Candidate {
    int32_t rank;
    int pos;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto consider = [&](int left) {
    if (left < 0 || syms[left].next < 0) return;
    if (const Merge* m = find_merge(syms[left].id, syms[syms[left].next].id)) heap.push({m->rank, left});
  };
  for (int i = 0; i + 1 < n; ++i) consider(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    Symbol& left = syms[c.pos];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = syms[left.next];
    const Merge* m = find_merge(left.id, right.id);
    if (m == nullptr || m->rank != c.rank) continue;  // stale: a neighbour changed
    left.id = m->new_id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) syms[right.next].prev = c.pos;
    consider(left.prev);
    consider(c.pos);
  }
  for (int i = n > 0 ? 0 : -1; i >= 0; i = syms[i].next) out.push_back(syms[i].id);
}

}  // namespace vc::tok
