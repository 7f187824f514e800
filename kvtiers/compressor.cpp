// The compressor registry (make_compressor, compressor_names), the default bf16
// codec and interface defaults, and the selection helpers shared by the token-dropping methods.
#include "kvtiers/compressor.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/error.hpp"
#include "kvtiers/compressors/factories.hpp"

namespace vc {
namespace {

using Factory = std::unique_ptr<Compressor> (*)();

struct Entry {
  const char* name;
  Factory make;
  bool quantizer;  // false: drops tokens
};

constexpr Entry kRegistry[] = {
    {"streaming_llm", &make_streaming_llm, false},
    {"snapkv", &make_snapkv, false},
    {"h2o", &make_h2o, false},
    {"expected_attention", &make_expected_attention, false},
    {"kvzip", &make_kvzip, false},
    {"kvzap", &make_kvzap, false},
    {"laprox", &make_laprox, false},
    {"kivi", &make_kivi, true},
    {"kvquant", &make_kvquant, true},
    {"rotate_kv", &make_rotate_kv, true},
};

const Entry* find_entry(const std::string& name) {
  for (const Entry& e : kRegistry) {
    if (name == e.name) return &e;
  }
  return nullptr;
}

std::string valid_names() {
  std::string s;
  for (const Entry& e : kRegistry) s += std::string(s.empty() ? "" : ", ") + e.name;
  return s + "; or DROP+QUANT, e.g. snapkv+kivi";
}

}  // namespace

void Compressor::select_globally(std::vector<LayerPlan>& /*layers*/, const KvShape& /*shape*/,
                                 double /*ratio*/) const {
  throw Error("compressor '" + std::string(name()) + "' does not select model-wide");
}

void Compressor::set_surrogate(std::shared_ptr<const KvzapSurrogate> /*s*/) {
  throw Error("compressor '" + std::string(name()) + "' takes no surrogate");
}

std::optional<size_t> Compressor::stored_bytes_bound(const KvShape& /*shape*/,
                                                      double /*ratio*/) const {
  return std::nullopt;
}

QuantSpec Compressor::plan_quant(const KvShape& /*shape*/, std::vector<size_t> /*rows*/,
                                 double /*ratio*/) const {
  return QuantSpec{};
}

void LayerPlan::append(LayerPlan&& slice) {
  for (auto& head : slice.keep) keep.push_back(std::move(head));
  scores.insert(scores.end(), slice.scores.begin(), slice.scores.end());
}

void KvSnapshot::read_heads(size_t l, size_t first, size_t count, LayerKv& out) const {
  if (l >= layers)
    throw Error("KvSnapshot: layer " + std::to_string(l) + " of " + std::to_string(layers));
  if (first > kv_heads || count > kv_heads - first)
    throw Error("KvSnapshot: KV heads " + std::to_string(first) + ".." +
                std::to_string(first + count) + " of " + std::to_string(kv_heads));
  out.reshape(l, count, head_dim, n_pos, first);
  const size_t per_head = n_pos * head_dim;
  if (k.size() < layers * kv_heads * per_head || v.size() < layers * kv_heads * per_head)
    throw Error("KvSnapshot: k/v hold fewer values than its shape needs");
  const size_t off = (l * kv_heads + first) * per_head;
  std::copy_n(k.begin() + long(off), count * per_head, out.k.begin());
  std::copy_n(v.begin() + long(off), count * per_head, out.v.begin());
}

size_t Compressor::quantize(size_t /*l*/, size_t /*g*/, const int32_t* /*positions*/, size_t n,
                            size_t head_dim, const ModelFacts& /*model*/, float* k, float* v,
                            PackedHead* packed) const {
  const size_t count = n * head_dim;
  for (size_t i = 0; i < count; ++i) {
    k[i] = bf16_to_f32(f32_to_bf16(k[i]));
    v[i] = bf16_to_f32(f32_to_bf16(v[i]));
  }
  if (packed) {
    pack_bf16(packed->k, k, count);
    pack_bf16(packed->v, v, count);
    packed->described = true;
  }
  return count * 2 * 2;
}

std::unique_ptr<Compressor> make_compressor(const std::string& name) {
  const size_t plus = name.find('+');
  if (plus == std::string::npos) {
    if (const Entry* e = find_entry(name)) return e->make();
    throw Error("unknown compressor '" + name + "' (valid: " + valid_names() + ")");
  }
  const std::string drop = name.substr(0, plus), quant = name.substr(plus + 1);
  const Entry* d = find_entry(drop);
  const Entry* q = find_entry(quant);
  if (!d || d->quantizer || !q || !q->quantizer) {
    throw Error("bad compressor composition '" + name +
                "': expected DROP+QUANT with DROP one of streaming_llm, snapkv, h2o, "
                "expected_attention, kvzip, kvzap, laprox and QUANT one of kivi, kvquant, rotate_kv "
                "(valid: " + valid_names() + ")");
  }
  return make_composition(d->make(), q->make());
}

std::vector<std::string> compressor_names() {
  std::vector<std::string> names;
  for (const Entry& e : kRegistry) names.emplace_back(e.name);
  return names;
}

std::vector<int32_t> keep_top(const std::vector<float>& scores, size_t budget,
                              const std::vector<int32_t>& always) {
  const size_t n = scores.size();
  std::vector<uint8_t> kept(n, 0);
  size_t count = 0;
  for (int32_t p : always) {
    if (p < 0 || size_t(p) >= n) {
      throw Error("keep_top: always-kept position " + std::to_string(p) + " outside [0, " +
                  std::to_string(n) + ")");
    }
    if (!kept[size_t(p)]) ++count;
    kept[size_t(p)] = 1;
  }
  const size_t target = std::min(budget, n);
  if (count < target) {
    std::vector<int32_t> rest;
    rest.reserve(n - count);
    for (size_t p = 0; p < n; ++p) {
      if (!kept[p]) rest.push_back(int32_t(p));
    }
    auto key = [&scores](int32_t p) {
      const float s = scores[size_t(p)];
      return std::isnan(s) ? -std::numeric_limits<float>::infinity() : s;
    };
    auto better = [&key](int32_t a, int32_t b) {
      const float ka = key(a), kb = key(b);
      return ka != kb ? ka > kb : a < b;
    };
    const size_t fill = target - count;
    std::partial_sort(rest.begin(), rest.begin() + std::ptrdiff_t(fill), rest.end(), better);
    for (size_t i = 0; i < fill; ++i) kept[size_t(rest[i])] = 1;
  }
  std::vector<int32_t> out;
  for (size_t p = 0; p < n; ++p) {
    if (kept[p]) out.push_back(int32_t(p));
  }
  return out;
}

size_t kept_per_head(size_t n_pos, double ratio) {
  if (!(ratio >= 1.0) || !std::isfinite(ratio)) {
    throw Error("compression ratio must be a finite number >= 1, got " + std::to_string(ratio));
  }
  if (n_pos == 0) return 0;
  const double k = std::round(double(n_pos) / ratio);
  return std::clamp(size_t(k), size_t(1), n_pos);
}

std::vector<int32_t> select_positions(const std::vector<float>& scores, size_t budget,
                            const std::vector<int32_t>& forced) {
  std::vector<char> taken(scores.size(), 0);
  std::vector<int32_t> keep;
  for (int32_t p : forced) {
    if (keep.size() >= budget) break;
    if (!taken[size_t(p)]) {
      taken[size_t(p)] = 1;
      keep.push_back(p);
    }
  }
  std::vector<float> rest;
  std::vector<int32_t> where;
  for (size_t p = 0; p < scores.size(); ++p) {
    if (taken[p]) continue;
    rest.push_back(std::isnan(scores[p]) ? std::numeric_limits<float>::lowest() : scores[p]);
    where.push_back(int32_t(p));
  }
  if (budget > keep.size()) {
    for (int32_t i : keep_top(rest, budget - keep.size())) keep.push_back(where[size_t(i)]);
  }
  std::sort(keep.begin(), keep.end());
  return keep;
}

std::vector<int32_t> select_by_threshold(const std::vector<float>& scores, double tau,
                                         size_t recent, const std::vector<int32_t>& forced) {
  const size_t n = scores.size();
  std::vector<char> kept(n, 0);
  for (int32_t p : forced) kept[size_t(p)] = 1;
  for (size_t p = n - std::min(recent, n); p < n; ++p) kept[p] = 1;
  for (size_t p = 0; p < n; ++p)
    if (double(scores[p]) >= tau) kept[p] = 1;  // NaN compares false
  std::vector<int32_t> out;
  for (size_t p = 0; p < n; ++p)
    if (kept[p]) out.push_back(int32_t(p));
  return out;
}

void Compressor::set_selection(const TokenSelection& s) {
  if (s.by_threshold && !scores_tokens())
    throw Error(std::string(name()) + ": threshold selection needs a method that scores tokens "
                "(snapkv, h2o, expected_attention, kvzip, kvzap, laprox)");
  if (s.by_threshold && !std::isfinite(s.threshold))
    throw Error(std::string(name()) + ": threshold must be a finite number");
  selection_ = s;
}

std::vector<int32_t> Compressor::select_kept(const std::vector<float>& scores, size_t budget,
                                             const std::vector<int32_t>& forced) const {
  const TokenSelection& s = selection();
  if (!s.by_threshold) return select_positions(scores, budget, forced);
  return select_by_threshold(scores, s.threshold, s.recent, forced);
}

std::unique_ptr<Compressor> make_compressor(const std::string& name,
                                            const CompressorSettings& settings) {
  auto c = make_compressor(name);
  TokenSelection sel;
  bool selection_set = false;
  for (const auto& [param, value] : settings) {
    try {
      if (param == "threshold" || param == "keep_recent") {
        if (param == "threshold") {
          sel.by_threshold = true;
          sel.threshold = value;
        } else {
          if (!(value >= 0 && value <= 1e9) || value != std::floor(value))
            throw Error("parameter 'keep_recent' must be an integer >= 0, got " +
                        std::to_string(value));
          sel.recent = size_t(value);
        }
        selection_set = true;
        continue;
      }
      c->set_param(param, value);
    } catch (const Error& e) {
      // The method's own list names its parameters; the selection's are taken here.
      const bool unknown = std::string(e.what()).find("unknown parameter") != std::string::npos;
      throw Error("compressor '" + name + "': " + e.what() +
                  (unknown && c->scores_tokens() ? "; and, for selection, threshold, keep_recent" : ""));
    }
  }
  if (selection_set) {
    try {
      c->set_selection(sel);
    } catch (const Error& e) {
      throw Error("compressor '" + name + "': " + e.what());
    }
  }
  return c;
}

std::pair<std::string, double> parse_compressor_setting(const std::string& text) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size())
    throw Error("compressor parameter '" + text + "': expected NAME=VALUE");
  const std::string value = text.substr(eq + 1);
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != value.size())
    throw Error("compressor parameter '" + text + "': '" + value + "' is not a number");
  return {text.substr(0, eq), v};
}

}  // namespace vc
