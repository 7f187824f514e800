// Request validation shared by every front end (see the header).
#include "runtime/request_validation.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "kvtiers/compressor.hpp"

namespace vc {

namespace {

using nlohmann::json;

std::string num(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.10g", v);
  return buf;
}

// A value for a message: short, and never a recursive dump of a deep document
// (inputs come from parse_json_bounded, so depth is bounded anyway).
std::string shown(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return std::string(v.type_name()) + " " + s;
}

std::string quote_text(std::string_view text) {
  std::string s(text.substr(0, 60));
  if (text.size() > 60) s += "...";
  return "'" + s + "'";
}

std::string range_text(int64_t lo, int64_t hi) {
  if (hi == std::numeric_limits<int64_t>::max()) return "an integer >= " + std::to_string(lo);
  return "an integer in " + std::to_string(lo) + ".." + std::to_string(hi);
}

[[noreturn]] void bad(std::string_view field, const std::string& expected, const json& v) {
  throw FieldError(std::string(field), "expected " + expected + ", got " + shown(v));
}

int64_t json_integer(std::string_view field, const json& v, int64_t lo, int64_t hi) {
  if (!v.is_number_integer()) bad(field, range_text(lo, hi), v);
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(hi)) bad(field, range_text(lo, hi), v);
  const int64_t x = v.is_number_unsigned() ? int64_t(v.get<uint64_t>()) : v.get<int64_t>();
  if (x < lo || x > hi) bad(field, range_text(lo, hi), v);
  return x;
}

double json_number(std::string_view field, const json& v) {
  if (!v.is_number()) bad(field, "a number", v);
  return v.get<double>();
}

std::string json_string(std::string_view field, const json& v) {
  if (!v.is_string()) bad(field, "a string", v);
  return v.get<std::string>();
}

bool json_bool(std::string_view field, const json& v) {
  if (!v.is_boolean()) bad(field, "true or false", v);
  return v.get<bool>();
}

constexpr const char* kFields[] = {"prompt", "prompt_ids", "max_tokens", "mode",
                                   "compressor", "compressor_params", "ratio", "draft",
                                   "fold_every", "draft_hierarchy", "ngram_min", "ngram_max",
                                   "ngram_proposal", "temperature", "top_k", "top_p",
                                   "seed", "stop", "ignore_eos", "logprobs", "top_logprobs"};

}  // namespace

FieldError::FieldError(std::string field, std::string message)
    : Error("field '" + field + "': " + message), field_(std::move(field)),
      message_(std::move(message)) {}

RequestLimits RequestLimits::of(const ModelConfig& c) {
  return {c.vocab_size, c.context_length(), c.context_length_field()};
}

std::string request_field_names() {
  std::string s;
  for (const char* f : kFields) s += (s.empty() ? "" : ", ") + std::string(f);
  return s;
}

int64_t parse_integer(std::string_view field, std::string_view text) {
  int64_t v = 0;
  const char* end = text.data() + text.size();
  const auto [p, ec] = std::from_chars(text.data(), end, v);
  if (ec == std::errc::result_out_of_range)
    throw FieldError(std::string(field), "expected an integer, got " + quote_text(text) +
                                             " (out of range)");
  if (ec != std::errc() || p != end || text.empty())
    throw FieldError(std::string(field), "expected an integer, got " + quote_text(text));
  return v;
}

double parse_number(std::string_view field, std::string_view text) {
  double v = 0;
  const char* end = text.data() + text.size();
  const auto [p, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc() || p != end || text.empty() || !std::isfinite(v))
    throw FieldError(std::string(field), "expected a finite number, got " + quote_text(text));
  return v;
}

uint64_t parse_seed(std::string_view field, std::string_view text) {
  uint64_t v = 0;
  const char* end = text.data() + text.size();
  const auto [p, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc() || p != end || text.empty())
    throw FieldError(std::string(field),
                     "expected an integer in 0..18446744073709551615, got " + quote_text(text));
  return v;
}

DraftChoice parse_draft(std::string_view field, std::string_view text) {
  if (text == "auto") return {0, true};
  uint64_t v = 0;
  const char* end = text.data() + text.size();
  const auto [p, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc() || p != end || text.empty() || v > kMaxDraftLength)
    throw FieldError(std::string(field), "expected a length 0.." + std::to_string(kMaxDraftLength) +
                                             " or 'auto', got " + quote_text(text));
  return {size_t(v), false};
}

void check_integer_range(std::string_view field, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo || v > hi)
    throw FieldError(std::string(field), "expected " + range_text(lo, hi) + ", got " +
                                             std::to_string(v));
}

void check_number_range(std::string_view field, double v, double lo, double hi, bool lo_open) {
  const bool ok = std::isfinite(v) && (lo_open ? v > lo : v >= lo) && v <= hi;
  if (ok) return;
  std::string expected = "a finite number ";
  if (hi == std::numeric_limits<double>::infinity())
    expected += (lo_open ? "> " : ">= ") + num(lo);
  else
    expected += "in " + std::string(lo_open ? "(" : "[") + num(lo) + ", " + num(hi) + "]";
  throw FieldError(std::string(field), "expected " + expected + ", got " + num(v));
}

ValidRequest validate_request(const RequestInput& in, const RequestLimits& limits,
                              const Tokenizer* tokenizer) {
  ValidRequest out;
  GenerateOptions& o = out.options;
  // The prompt.
  if (!in.prompt_ids.empty()) {
    for (int32_t t : in.prompt_ids)
      if (t < 0 || t >= limits.vocab_size)
        throw FieldError("prompt_ids", "token id " + std::to_string(t) +
                                           " is outside the vocabulary (0.." +
                                           std::to_string(limits.vocab_size - 1) + ")");
    out.prompt_ids = in.prompt_ids;
  } else {
    if (in.prompt.size() > kMaxPromptBytes)
      throw FieldError("prompt", "longer than the limit of " +
                                     std::to_string(kMaxPromptBytes >> 20) + " MiB");
    if (tokenizer == nullptr) throw FieldError("prompt", "a text prompt needs a tokenizer");
    out.prompt_ids = tokenizer->encode(in.prompt);
    if (out.prompt_ids.empty()) throw FieldError("prompt", "the prompt has no tokens");
  }
  // Length: the prompt and every generated token must fit the model's context.
  const auto ctx = int64_t(limits.context);
  const auto prompt = int64_t(out.prompt_ids.size());
  if (prompt >= ctx)
    throw FieldError(in.prompt_ids.empty() ? "prompt" : "prompt_ids",
                     "the prompt has " + std::to_string(prompt) +
                         " tokens; the model's context holds " + std::to_string(ctx) + " (" +
                         limits.context_field + ")");
  if (in.max_tokens < 1 || in.max_tokens > ctx - prompt)
    throw FieldError("max_tokens", "expected " + range_text(1, ctx - prompt) + " (the prompt's " +
                                       std::to_string(prompt) + " tokens + max_tokens must fit the "
                                       "model's context of " + std::to_string(ctx) + "), got " +
                                       std::to_string(in.max_tokens));
  o.max_tokens = int(in.max_tokens);
  // Mode and compression.
  if (in.mode == "full") o.mode = DecodeMode::full;
  else if (in.mode == "lossy") o.mode = DecodeMode::lossy;
  else if (in.mode == "vericache") o.mode = DecodeMode::vericache;
  else
    throw FieldError("mode", "expected full, lossy or vericache, got " + quote_text(in.mode));
  check_number_range("ratio", in.ratio, 1.0, kMaxRatio);
  if (o.mode != DecodeMode::full) {
    try {
      (void)make_compressor(in.compressor, in.compressor_params);
    } catch (const Error& e) {
      throw FieldError(in.compressor_params.empty() ? "compressor" : "compressor_params", e.what());
    }
  }
  o.compressor = in.compressor;
  o.compressor_params = in.compressor_params;
  o.ratio = in.ratio;
  const DraftChoice d = parse_draft("draft", in.draft);
  o.draft_length = d.length;
  o.draft_auto = d.is_auto;
  check_integer_range("fold_every", in.fold_every, 0, int64_t(1) << 30);
  o.fold_every = size_t(in.fold_every);
  if (in.draft_hierarchy == "none") o.draft_hierarchy = DraftHierarchy::none;
  else if (in.draft_hierarchy == "ngram") o.draft_hierarchy = DraftHierarchy::ngram;
  else
    throw FieldError("draft_hierarchy",
                     "expected none or ngram, got " + quote_text(in.draft_hierarchy));
  check_integer_range("ngram_min", in.ngram_min, 1, kMaxNgram);
  check_integer_range("ngram_max", in.ngram_max, 1, kMaxNgram);
  if (in.ngram_max < in.ngram_min)
    throw FieldError("ngram_max", "expected at least ngram_min (" + std::to_string(in.ngram_min) +
                                      "), got " + std::to_string(in.ngram_max));
  check_integer_range("ngram_proposal", in.ngram_proposal, 1, int64_t(kMaxDraftLength));
  o.ngram = NgramParams{size_t(in.ngram_min), size_t(in.ngram_max), size_t(in.ngram_proposal)};
  // Sampling.
  check_number_range("temperature", in.temperature, 0.0, 1e6);
  check_integer_range("top_k", in.top_k, 0, limits.vocab_size);
  check_number_range("top_p", in.top_p, 0.0, 1.0, /*lo_open=*/true);
  check_integer_range("top_logprobs", in.top_logprobs, 0, kMaxTopLogprobs);
  o.sampling = SamplingParams{float(in.temperature), int(in.top_k), float(in.top_p), in.seed,
                              int(in.top_logprobs)};
  for (const std::string& s : in.stop)
    if (s.empty()) throw FieldError("stop", "expected non-empty stop strings, got an empty one");
  if (!in.stop.empty() && tokenizer == nullptr)
    throw FieldError("stop", "stop strings need a tokenizer");
  o.stop = in.stop;
  o.stop_at_eos = !in.ignore_eos;
  out.logprobs = in.logprobs || in.top_logprobs > 0;
  return out;
}

RequestInput request_from_json(const json& obj, const std::vector<std::string>& extra_keys,
                               const RequestInput& base) {
  if (!obj.is_object()) throw FieldError("(request)", "expected a JSON object, got " + shown(obj));
  RequestInput r = base;
  const bool has_text = obj.contains("prompt"), has_ids = obj.contains("prompt_ids");
  if (!has_text && !has_ids)
    throw FieldError("prompt", "missing; give 'prompt' (a string) or 'prompt_ids' (an array)");
  if (has_text && has_ids) throw FieldError("prompt", "give 'prompt' or 'prompt_ids', not both");
  constexpr int64_t kIntMax = std::numeric_limits<int32_t>::max();
  for (const auto& [key, v] : obj.items()) {
    if (std::find(extra_keys.begin(), extra_keys.end(), key) != extra_keys.end()) continue;
    if (key == "prompt") {
      r.prompt = json_string(key, v);
      if (r.prompt.empty()) throw FieldError(key, "the prompt is empty");
    } else if (key == "prompt_ids") {
      if (!v.is_array() || v.empty()) bad(key, "a non-empty array of token ids", v);
      for (const json& t : v) r.prompt_ids.push_back(int32_t(json_integer(key, t, 0, kIntMax)));
    } else if (key == "max_tokens") {
      r.max_tokens = json_integer(key, v, 1, kIntMax);
    } else if (key == "mode") {
      r.mode = json_string(key, v);
    } else if (key == "compressor") {
      r.compressor = json_string(key, v);
    } else if (key == "compressor_params") {
      if (!v.is_object()) bad(key, "an object of parameter names to numbers", v);
      for (const auto& [name, value] : v.items())
        r.compressor_params.emplace_back(name, json_number(key + "." + name, value));
    } else if (key == "ratio") {
      r.ratio = json_number(key, v);
    } else if (key == "draft") {
      if (v.is_number_integer()) r.draft = std::to_string(json_integer(key, v, 0, kMaxDraftLength));
      else if (v.is_string()) r.draft = v.get<std::string>();
      else bad(key, "a length 0.." + std::to_string(kMaxDraftLength) + " or \"auto\"", v);
    } else if (key == "fold_every") {
      r.fold_every = json_integer(key, v, 0, int64_t(1) << 30);
    } else if (key == "draft_hierarchy") {
      r.draft_hierarchy = json_string(key, v);
    } else if (key == "ngram_min") {
      r.ngram_min = json_integer(key, v, 1, kMaxNgram);
    } else if (key == "ngram_max") {
      r.ngram_max = json_integer(key, v, 1, kMaxNgram);
    } else if (key == "ngram_proposal") {
      r.ngram_proposal = json_integer(key, v, 1, int64_t(kMaxDraftLength));
    } else if (key == "temperature") {
      r.temperature = json_number(key, v);
    } else if (key == "top_k") {
      r.top_k = json_integer(key, v, 0, kIntMax);
    } else if (key == "top_p") {
      r.top_p = json_number(key, v);
    } else if (key == "seed") {
      if (!v.is_number_integer() || (!v.is_number_unsigned() && v.get<int64_t>() < 0))
        bad(key, "an integer in 0..18446744073709551615", v);
      r.seed = v.get<uint64_t>();
    } else if (key == "stop") {
      if (v.is_string()) {
        r.stop = {v.get<std::string>()};
      } else if (v.is_array()) {
        for (const json& s : v) r.stop.push_back(json_string(key, s));
      } else {
        bad(key, "a string or an array of strings", v);
      }
    } else if (key == "ignore_eos") {
      r.ignore_eos = json_bool(key, v);
    } else if (key == "logprobs") {
      r.logprobs = json_bool(key, v);
    } else if (key == "top_logprobs") {
      r.top_logprobs = json_integer(key, v, 0, kMaxTopLogprobs);
    } else {
      std::string known = request_field_names();
      for (const auto& k : extra_keys) known += ", " + k;
      throw FieldError(key, "unknown field (known: " + known + ")");
    }
  }
  return r;
}

}  // namespace vc
