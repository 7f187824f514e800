// Choice "logprobs" objects of both endpoints (openai_logprobs.hpp).
#include "tools/server/openai_logprobs.hpp"

#include <cmath>

namespace vc::server {

namespace {

using json = nlohmann::ordered_json;

double reported(float v) { return std::isfinite(v) ? double(v) : -9999.0; }

json utf8_bytes(const std::string& s) {
  json out = json::array();
  for (char c : s) out.push_back(int(static_cast<unsigned char>(c)));
  return out;
}

json chat_content(std::span<const LoggedToken> tokens, const TokenText& text) {
  json content = json::array();
  for (const LoggedToken& t : tokens) {
    const std::string s = text(t.id);
    json top = json::array();
    for (const vericache::TokenLogprob& a : t.top) {
      const std::string at = text(a.id);
      top.push_back({{"token", at}, {"logprob", reported(a.logprob)}, {"bytes", utf8_bytes(at)}});
    }
    content.push_back({{"token", s},
                       {"logprob", reported(t.logprob)},
                       {"bytes", utf8_bytes(s)},
                       {"top_logprobs", std::move(top)}});
  }
  return {{"content", std::move(content)}};
}

json completion_logprobs(std::span<const LoggedToken> tokens, int top_logprobs,
                         const TokenText& text, size_t& offset) {
  json texts = json::array(), lps = json::array(), offsets = json::array();
  json tops = top_logprobs > 0 ? json::array() : json(nullptr);
  for (const LoggedToken& t : tokens) {
    const std::string s = text(t.id);
    texts.push_back(s);
    lps.push_back(reported(t.logprob));
    offsets.push_back(offset);
    offset += s.size();
    if (top_logprobs > 0) {
      json by_text = json::object();
      // Most likely first, as OpenAI lists them; a text two ids decode to keeps the
      // likelier one's logprob.
      for (const vericache::TokenLogprob& a : t.top) {
        const std::string at = text(a.id);
        if (!by_text.contains(at)) by_text[at] = reported(a.logprob);
      }
      tops.push_back(std::move(by_text));
    }
  }
  return {{"tokens", std::move(texts)},
          {"token_logprobs", std::move(lps)},
          {"top_logprobs", std::move(tops)},
          {"text_offset", std::move(offsets)}};
}

}  // namespace

std::vector<LoggedToken> logged_tokens(const vericache::Result& r) {
  std::vector<LoggedToken> out;
  out.reserve(r.output_ids.size());
  for (size_t i = 0; i < r.output_ids.size(); ++i) {
    LoggedToken t{r.output_ids[i], r.output_logprobs.at(i), {}};
    if (i < r.output_top_logprobs.size()) t.top = r.output_top_logprobs[i];
    out.push_back(std::move(t));
  }
  return out;
}

json logprobs_json(Endpoint endpoint, std::span<const LoggedToken> tokens, int top_logprobs,
                   const TokenText& text, size_t& text_offset) {
  if (endpoint == Endpoint::chat) return chat_content(tokens, text);
  return completion_logprobs(tokens, top_logprobs, text, text_offset);
}

}  // namespace vc::server
