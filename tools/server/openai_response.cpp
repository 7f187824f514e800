// Response bodies and streamed text (openai_response.hpp).
#include "tools/server/openai_response.hpp"

#include <algorithm>
#include <random>

#include "tools/server/openai_logprobs.hpp"
#include "tools/server/remote_stats_json.hpp"

namespace vc::server {

namespace {

using json = nlohmann::ordered_json;

// Bytes at the end of `s` that start a UTF-8 sequence not yet complete.
size_t incomplete_utf8_tail(const std::string& s) {
  const size_t n = s.size();
  for (size_t back = 1; back <= std::min<size_t>(3, n); ++back) {
    const auto c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: look further back
    size_t need = 1;
    if ((c & 0xE0) == 0xC0) need = 2;
    else if ((c & 0xF0) == 0xE0) need = 3;
    else if ((c & 0xF8) == 0xF0) need = 4;
    return need > back ? back : 0;
  }
  return 0;
}

// Length of the longest suffix of `s` that is a proper prefix of a stop string.
size_t stop_prefix_tail(const std::string& s, const std::vector<std::string>& stop) {
  size_t hold = 0;
  for (const std::string& st : stop)
    for (size_t k = std::min(st.size() - 1, s.size()); k > hold; --k)
      if (s.compare(s.size() - k, k, st, 0, k) == 0) {
        hold = k;
        break;
      }
  return hold;
}

}  // namespace

std::string finish_reason(const std::string& r) {
  if (r == "eos" || r == "stop") return "stop";
  return r;
}

json usage_json(const vericache::Result& r) {
  return {{"prompt_tokens", r.prompt_ids.size()},
          {"completion_tokens", r.output_ids.size()},
          {"total_tokens", r.prompt_ids.size() + r.output_ids.size()}};
}

json vericache_stats_json(const vericache::Request& q, const vericache::Result& r) {
  const vericache::RequestStats& s = r.stats;
  json j = {{"mode", q.mode},
            {"queue_seconds", s.queue_seconds},
            {"prefill_seconds", s.prefill_seconds},
            {"total_seconds", s.total_seconds},
            {"fast_bytes_peak", s.fast_bytes_peak},
            {"fast_bytes_reserved", s.fast_bytes_reserved},
            {"seed", q.seed}};
  if (q.mode != "full") {
    j["compressor"] = q.compressor;
    j["ratio"] = q.ratio;
    j["compressed_bytes"] = s.compressed_bytes;
  }
  if (q.mode == "vericache") {
    j["draft"] = q.draft;
    j["rounds"] = s.rounds;
    j["drafted_tokens"] = s.drafted;
    j["accepted_tokens"] = s.accepted;
    j["acceptance_rate"] = s.drafted ? double(s.accepted) / double(s.drafted) : 0.0;
    j["accepted_per_round_histogram"] = s.accepted_histogram;
    j["draft_seconds"] = s.draft_seconds;
    j["verify_seconds"] = s.verify_seconds;
    j["draft_hierarchy"] = q.draft_hierarchy;
    if (q.draft_hierarchy != "none") {
      j["ngram_proposed"] = s.ngram_proposed;
      j["ngram_confirmed"] = s.ngram_confirmed;
      j["ngram_accepted"] = s.ngram_accepted;
      j["ngram_seconds"] = s.ngram_seconds;
      j["drafter_passes"] = s.drafter_passes;
    }
  }
  if (s.remote)  // serve --remote: the prefix taken from the store
    j["remote"] = remote_stats_json(s);
  return j;
}

json response_body(const ResponseMeta& m, const ParsedRequest& p, const vericache::Result& r,
                   const Decoder& decode, const ParsedReply* parsed) {
  const bool chat = m.endpoint == Endpoint::chat;
  const bool called = chat && parsed != nullptr && !parsed->calls.empty();
  json choice = {{"index", 0}};
  if (called) {
    const bool blank = parsed->content.find_first_not_of(" \t\n\r\f\v") == std::string::npos;
    choice["message"] = {{"role", "assistant"},
                         {"content", blank ? json(nullptr) : json(parsed->content)},
                         {"tool_calls", tool_calls_json(parsed->calls, false)}};
  } else if (chat) {
    choice["message"] = {{"role", "assistant"}, {"content", r.text}};
  } else {
    choice["text"] = r.text;
  }
  json logprobs = nullptr;
  if (p.logprobs) {
    size_t offset = 0;
    logprobs = logprobs_json(m.endpoint, logged_tokens(r), p.top_logprobs,
                             [&](int32_t id) { return decode({id}); }, offset);
  }
  choice["logprobs"] = std::move(logprobs);
  choice["finish_reason"] = called ? "tool_calls" : finish_reason(r.finish_reason);
  return {{"id", m.id},
          {"object", chat ? "chat.completion" : "text_completion"},
          {"created", m.created},
          {"model", m.model},
          {"choices", json::array({choice})},
          {"usage", usage_json(r)},
          {"vericache", vericache_stats_json(p.engine_request, r)}};
}

json chunk_body(const ResponseMeta& m, const std::string& delta, const std::string& finish,
                bool first, json logprobs) {
  const bool chat = m.endpoint == Endpoint::chat;
  json choice = {{"index", 0}};
  if (chat) {
    json d = json::object();
    if (first) d["role"] = "assistant";
    if (!delta.empty() || first) d["content"] = delta;
    choice["delta"] = d;
  } else {
    choice["text"] = delta;
  }
  choice["logprobs"] = std::move(logprobs);
  choice["finish_reason"] = finish.empty() ? json(nullptr) : json(finish);
  return {{"id", m.id},
          {"object", chat ? "chat.completion.chunk" : "text_completion"},
          {"created", m.created},
          {"model", m.model},
          {"choices", json::array({choice})}};
}

std::string new_tool_call_id() {
  static constexpr char kChars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::uniform_int_distribution<size_t> pick(0, sizeof(kChars) - 2);
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kChars[pick(rng)];
  return id;
}

json tool_calls_json(const std::vector<ToolCall>& calls, bool streamed) {
  json list = json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    json c = json::object();
    if (streamed) c["index"] = i;
    c["id"] = new_tool_call_id();
    c["type"] = "function";
    c["function"] = {{"name", calls[i].name}, {"arguments", calls[i].arguments}};
    list.push_back(std::move(c));
  }
  return list;
}

json tool_calls_chunk_body(const ResponseMeta& m, const std::string& content,
                           const std::vector<ToolCall>& calls, bool first, json logprobs) {
  json d = json::object();
  if (first) d["role"] = "assistant";
  if (!content.empty()) d["content"] = content;
  else if (first) d["content"] = nullptr;
  d["tool_calls"] = tool_calls_json(calls, true);
  json choice = {{"index", 0}, {"delta", d}};
  choice["logprobs"] = std::move(logprobs);
  choice["finish_reason"] = nullptr;
  return {{"id", m.id},
          {"object", "chat.completion.chunk"},
          {"created", m.created},
          {"model", m.model},
          {"choices", json::array({choice})}};
}

std::vector<json> final_tool_call_chunks(const ResponseMeta& m, const ParsedReply& parsed,
                                         const std::string& sent, const std::string& finish,
                                         bool first, json logprobs) {
  const std::string rest =
      parsed.content.starts_with(sent) ? parsed.content.substr(sent.size()) : std::string();
  if (parsed.calls.empty()) return {chunk_body(m, rest, finish, first, std::move(logprobs))};
  const bool blank = rest.find_first_not_of(" \t\n\r\f\v") == std::string::npos;
  return {tool_calls_chunk_body(m, blank && sent.empty() ? "" : rest, parsed.calls, first,
                                std::move(logprobs)),
          chunk_body(m, "", "tool_calls", false)};
}

json usage_chunk_body(const ResponseMeta& m, const ParsedRequest& p, const vericache::Result& r) {
  return {{"id", m.id},
          {"object", m.endpoint == Endpoint::chat ? "chat.completion.chunk" : "text_completion"},
          {"created", m.created},
          {"model", m.model},
          {"choices", json::array()},
          {"usage", usage_json(r)},
          {"vericache", vericache_stats_json(p.engine_request, r)}};
}

std::string TextStream::push(int32_t id) {
  ids_.push_back(id);
  const std::string text = decode_(ids_);
  if (text.size() <= sent_.size() || text.compare(0, sent_.size(), sent_) != 0) return "";
  size_t end = text.size() - incomplete_utf8_tail(text);
  // U+FFFD at the end may be a byte token waiting for the rest of its character.
  if (end >= 3 && text.compare(end - 3, 3, "\xEF\xBF\xBD") == 0) end -= 3;
  end -= std::min(end, stop_prefix_tail(text.substr(0, end), stop_));
  // A stop string already inside: the engine stops here and cuts before it.
  for (const std::string& st : stop_) {
    const size_t at = text.find(st, sent_.size() > st.size() ? sent_.size() - st.size() : 0);
    if (at != std::string::npos) end = std::min(end, at);
  }
  if (end <= sent_.size()) return "";
  std::string delta = text.substr(sent_.size(), end - sent_.size());
  sent_ += delta;
  return delta;
}

std::string TextStream::finish(const std::string& final_text) {
  if (final_text.size() < sent_.size() || final_text.compare(0, sent_.size(), sent_) != 0)
    return "";  // cannot happen: nothing past the final text is ever let out
  std::string rest = final_text.substr(sent_.size());
  sent_ = final_text;
  return rest;
}

}  // namespace vc::server
