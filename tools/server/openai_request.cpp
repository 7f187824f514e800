// OpenAI body -> batch request JSON -> the shared validation layer (openai_request.hpp).
#include "tools/server/openai_request.hpp"

#include <algorithm>
#include <optional>
#include <random>

#include "runtime/model/tokenizer.hpp"

namespace vc::server {

namespace {

using nlohmann::json;

// Fields passed through unchanged to the shared request reader.
constexpr const char* kPassThrough[] = {"temperature",     "top_p",     "top_k",
                                        "seed",            "stop",      "mode",
                                        "compressor",      "compressor_params",
                                        "ratio",           "draft",     "draft_hierarchy",
                                        "ngram_min",       "ngram_max", "ngram_proposal",
                                        "fold_every",      "ignore_eos"};

// A seed for a request that names none: from the OS's entropy, one per request.
uint64_t fresh_seed() {
  thread_local std::random_device rd;
  return (uint64_t(rd()) << 32) ^ uint64_t(rd());
}

bool is_pass_through(const std::string& key) {
  return std::any_of(std::begin(kPassThrough), std::end(kPassThrough),
                     [&](const char* k) { return key == k; });
}

std::string shown(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return s;
}

// A numeric field that must hold one value (an OpenAI knob without an engine
// counterpart): absent, null or `neutral` are fine.
void require_neutral(const std::string& key, const json& v, double neutral) {
  if (v.is_null()) return;
  if (!v.is_number() || v.get<double>() != neutral)
    throw bad_request(key, "'" + key + "' is not supported: only " +
                               shown(neutral == double(int64_t(neutral)) ? json(int64_t(neutral))
                                                                         : json(neutral)) +
                               " (or absent), got " + shown(v));
}

// An integer 0..hi (a number of logprobs).
int64_t integer_in(const std::string& key, const json& v, int64_t hi) {
  if (!v.is_number_integer() || (v.is_number_unsigned() ? v.get<uint64_t>() > uint64_t(hi)
                                                        : v.get<int64_t>() < 0 ||
                                                              v.get<int64_t>() > hi))
    throw bad_request(key, "'" + key + "': expected an integer in 0.." + std::to_string(hi) +
                               ", got " + shown(v));
  return v.get<int64_t>();
}

// The prompt of /v1/completions: a string, a list of one string, a list of token
// ids, or a list of one list of token ids.
void read_prompt(const json& v, json& line) {
  if (v.is_string()) {
    line["prompt"] = v;
    return;
  }
  if (v.is_array() && !v.empty()) {
    if (v.size() == 1 && v[0].is_string()) {
      line["prompt"] = v[0];
      return;
    }
    if (v[0].is_number_integer()) {
      line["prompt_ids"] = v;
      return;
    }
    if (v.size() == 1 && v[0].is_array()) {
      line["prompt_ids"] = v[0];
      return;
    }
    if (v.size() > 1 && (v[0].is_string() || v[0].is_array()))
      throw bad_request("prompt", "one prompt per request is supported, got " +
                                      std::to_string(v.size()));
  }
  throw bad_request("prompt",
                    "expected a string, a list of token ids, or a list of one of them, got " +
                        shown(v));
}

// An output length the body asks for: max_tokens, or in chat max_completion_tokens.
struct AskedLength {
  std::string field;
  int64_t value = 0;
};

// An integer 1..cap (the server's --max-tokens-limit, or the context).
AskedLength asked_length(const std::string& key, const json& v, int64_t cap) {
  // nlohmann reads a non-negative integer (0 too) as unsigned.
  if (!v.is_number_integer() ||
      (v.is_number_unsigned() ? v.get<uint64_t>() == 0 : v.get<int64_t>() < 1))
    throw bad_request(key, "'" + key + "': expected an integer >= 1, got " + shown(v));
  if (v.is_number_unsigned() ? v.get<uint64_t>() > uint64_t(cap) : v.get<int64_t>() > cap)
    throw bad_request(key, "'" + key + "': expected at most " + std::to_string(cap) +
                               " (the server's limit), got " + shown(v));
  return {key, v.get<int64_t>()};
}

// The asked length must leave the prompt room in the model's context.
void check_room(const AskedLength& a, int64_t prompt, const RequestLimits& limits) {
  const auto ctx = int64_t(limits.context);
  if (a.value > ctx - prompt)
    throw bad_request(a.field, "'" + a.field + "': expected an integer in 1.." +
                                   std::to_string(ctx - prompt) +
                                   " (the prompt's " + std::to_string(prompt) + " tokens + " +
                                   a.field + " must fit the model's context of " +
                                   std::to_string(ctx) + " (" + limits.context_field +
                                   ")), got " + std::to_string(a.value));
}

}  // namespace

ParsedRequest parse_request(const json& body, Endpoint endpoint, const ServeSettings& settings,
                            const RequestLimits& limits, const Tokenizer& tokenizer,
                            const std::string& prompt_text) {
  if (!body.is_object()) throw bad_request("", "the request body must be a JSON object");
  ParsedRequest out;
  json line = {{"mode", settings.mode},
               {"compressor", settings.compressor},
               {"ratio", settings.ratio},
               {"draft", settings.draft},
               {"draft_hierarchy", settings.draft_hierarchy},
               {"ngram_min", settings.ngram_min},
               {"ngram_max", settings.ngram_max},
               {"ngram_proposal", settings.ngram_proposal},
               // Checked here (the lengths below), once the prompt's length is known.
               {"max_tokens", 1}};
  const bool chat = endpoint == Endpoint::chat;
  const int64_t cap = settings.max_tokens_limit > 0 ? settings.max_tokens_limit
                                                     : int64_t(limits.context);
  std::optional<AskedLength> max_tokens, max_completion_tokens;
  if (chat) line["prompt"] = prompt_text;
  bool has_prompt = chat;
  bool has_stream_options = false;
  bool has_top_logprobs = false;
  bool tool_choice_none = false;
  for (const auto& [key, v] : body.items()) {
    if (is_pass_through(key)) {
      if (!v.is_null()) line[key] = v;
    } else if (key == "model") {
      if (!v.is_string()) throw bad_request(key, "expected a string, got " + shown(v));
      if (v.get<std::string>() != settings.model_name)
        throw ApiError(404, "invalid_request_error",
                       "The model '" + v.get<std::string>() + "' does not exist; this server "
                       "serves '" + settings.model_name + "'",
                       key, "model_not_found");
    } else if (key == "prompt" && !chat) {
      read_prompt(v, line);
      has_prompt = true;
    } else if (key == "messages" && chat) {
      // rendered by the caller into prompt_text
    } else if (key == "tools" && chat) {
      // rendered by the caller into prompt_text (which checked them); their names are
      // the functions a reply's tool calls may name
      if (v.is_array())
        for (const json& t : v)
          if (t.is_object() && t.contains("function") && t["function"].is_object() &&
              t["function"].contains("name") && t["function"]["name"].is_string())
            out.tool_names.push_back(t["function"]["name"].get<std::string>());
    } else if (key == "tool_choice" && chat) {
      // The tools reach the template; no call is forced (the model's calls are parsed
      // out of its reply unless the choice is "none").
      if (!v.is_null() && v != "auto" && v != "none")
        throw bad_request(key, "only \"auto\" and \"none\" are supported (the server does not "
                               "force tool calls), got " + shown(v));
      tool_choice_none = v == "none";
    } else if (key == "parallel_tool_calls" && chat) {
      if (!v.is_null() && !v.is_boolean())
        throw bad_request(key, "expected true or false, got " + shown(v));
    } else if (key == "max_tokens") {
      if (!v.is_null()) max_tokens = asked_length(key, v, cap);
    } else if (key == "max_completion_tokens" && chat) {
      if (!v.is_null()) max_completion_tokens = asked_length(key, v, cap);
    } else if (key == "n" || key == "best_of") {
      require_neutral(key, v, 1);
    } else if (key == "presence_penalty" || key == "frequency_penalty") {
      require_neutral(key, v, 0);
    } else if (key == "stream") {
      if (!v.is_null() && !v.is_boolean()) throw bad_request(key, "expected true or false, got " + shown(v));
      out.stream = v.is_boolean() && v.get<bool>();
    } else if (key == "stream_options") {
      if (v.is_null()) continue;
      if (!v.is_object()) throw bad_request(key, "expected an object, got " + shown(v));
      for (const auto& [k, x] : v.items()) {
        if (k != "include_usage")
          throw bad_request(key + "." + k, "unknown field (known: include_usage)");
        if (!x.is_boolean()) throw bad_request(key + "." + k, "expected true or false, got " + shown(x));
        out.include_usage = x.get<bool>();
      }
      has_stream_options = true;
    } else if (key == "logprobs") {
      if (v.is_null()) continue;
      if (chat) {
        if (!v.is_boolean())
          throw bad_request(key, "'logprobs': expected true or false, got " + shown(v));
        out.logprobs = v.get<bool>();
      } else {  // legacy completions: the number of alternatives per token
        out.top_logprobs = int(integer_in(key, v, kMaxCompletionLogprobs));
        out.logprobs = true;
      }
    } else if (key == "top_logprobs" && chat) {
      if (v.is_null()) continue;
      out.top_logprobs = int(integer_in(key, v, kMaxChatTopLogprobs));
      has_top_logprobs = true;
    } else if (key == "echo") {
      if (!v.is_null() && v != json(false))
        throw bad_request(key, "'echo' is not supported: only false (or absent), got " + shown(v));
    } else if (key == "logit_bias") {
      if (!v.is_null() && !(v.is_object() && v.empty()))
        throw bad_request(key, "'logit_bias' is not supported: only {} (or absent)");
    } else if (key == "user") {  // the end user's id: accepted and unused
      if (!v.is_null() && !v.is_string()) throw bad_request(key, "expected a string, got " + shown(v));
    } else if (key == "suffix" && v.is_null()) {
      // accepted and unused
    } else {
      throw bad_request(key, "unknown field '" + key + "'");
    }
  }
  if (!has_prompt) throw bad_request("prompt", "missing 'prompt'");
  if (has_stream_options && !out.stream)
    throw bad_request("stream_options", "'stream_options' is only allowed with stream: true");
  if (has_top_logprobs && !out.logprobs)
    throw bad_request("top_logprobs", "'top_logprobs' is only allowed with logprobs: true");
  if (tool_choice_none) out.tool_names.clear();
  if (out.logprobs) line["logprobs"] = true;
  if (out.top_logprobs > 0) line["top_logprobs"] = out.top_logprobs;
  // Sampling without a seed draws a fresh one, as OpenAI clients expect a new
  // sample each time; the response names it (vericache.seed), so the same output
  // can be asked for again.
  if (!line.contains("seed")) line["seed"] = fresh_seed();

  // The shared reader and checks: the same as `vericache batch` and `generate`.
  ValidRequest valid;
  RequestInput in;
  try {
    in = request_from_json(line);
    valid = validate_request(in, limits, &tokenizer);
  } catch (const FieldError& e) {
    std::string param = e.field();
    if (param == "prompt_ids") param = "prompt";
    if (chat && param == "prompt") param = "messages";
    // The message names the field as the client sent it, as param does.
    std::string message = e.what();
    if (param != e.field()) {
      const std::string from = "'" + e.field() + "'", to = "'" + param + "'";
      if (const size_t at = message.find(from); at != std::string::npos)
        message.replace(at, from.size(), to);
    }
    throw bad_request(param, message);
  }
  const int64_t prompt_cap = settings.max_prompt_tokens > 0 ? settings.max_prompt_tokens
                                                            : int64_t(limits.context);
  if (int64_t(valid.prompt_ids.size()) > prompt_cap)
    throw bad_request(chat ? "messages" : "prompt",
                      "the prompt has " + std::to_string(valid.prompt_ids.size()) +
                          " tokens, more than the server's limit of " + std::to_string(prompt_cap));
  // The output length: max_completion_tokens over max_tokens (deprecated in chat, as
  // in OpenAI), each checked on its own; without either the server's default, cut to
  // the room the prompt leaves in the context.
  const auto prompt_tokens = int64_t(valid.prompt_ids.size());
  for (const auto* a : {&max_tokens, &max_completion_tokens})
    if (a->has_value()) check_room(**a, prompt_tokens, limits);
  const std::optional<AskedLength>& asked = max_completion_tokens ? max_completion_tokens
                                                                  : max_tokens;
  valid.options.max_tokens =
      int(asked ? asked->value
                : std::min({settings.default_max_tokens, cap,
                            int64_t(limits.context) - prompt_tokens}));
  vericache::Request& r = out.engine_request;
  r.prompt_ids = valid.prompt_ids;
  r.max_tokens = valid.options.max_tokens;
  r.mode = in.mode;
  r.compressor = in.compressor;
  r.compressor_params = in.compressor_params;
  r.ratio = in.ratio;
  r.draft = in.draft;
  r.draft_hierarchy = in.draft_hierarchy;
  r.ngram_min = size_t(in.ngram_min);
  r.ngram_max = size_t(in.ngram_max);
  r.ngram_proposal = size_t(in.ngram_proposal);
  r.fold_every = valid.options.fold_every;
  r.temperature = valid.options.sampling.temperature;
  r.top_k = valid.options.sampling.top_k;
  r.top_p = valid.options.sampling.top_p;
  r.seed = valid.options.sampling.seed;
  r.stop = in.stop;
  r.ignore_eos = in.ignore_eos;
  r.top_logprobs = valid.top_logprobs();
  out.prompt_tokens = valid.prompt_ids.size();
  return out;
}

}  // namespace vc::server
