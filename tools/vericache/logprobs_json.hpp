// The logprob fields of `vericache generate --json` and `vericache batch` results,
// one format for both:
//   "output_logprobs":     [lp, ...]                       one per output token
//   "output_top_logprobs": [[{"id": ID, "logprob": lp}, ...], ...]
//                          one list per output token, its N most likely tokens by
//                          logprob descending (ties: the smaller id first)
// Every logprob is printed with 9 significant digits: enough to tell any two floats
// apart, and the same text on every run.
#pragma once
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace vc::cli {

[[nodiscard]] inline double nine_digits(float v) { return std::stod(fmt::format("{:.9g}", v)); }

/// [lp, ...] of a list of floats.
template <class Floats>
[[nodiscard]] nlohmann::json logprobs_json(const Floats& logprobs) {
  nlohmann::json out = nlohmann::json::array();
  for (float v : logprobs) out.push_back(nine_digits(v));
  return out;
}

/// [[{"id", "logprob"}, ...], ...] of per-token lists of {id, logprob} entries
/// (vc::TokenLogprob or vericache::TokenLogprob).
template <class Lists>
[[nodiscard]] nlohmann::json top_logprobs_json(const Lists& lists) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& list : lists) {
    nlohmann::json entries = nlohmann::json::array();
    for (const auto& e : list) entries.push_back({{"id", e.id}, {"logprob", nine_digits(e.logprob)}});
    out.push_back(std::move(entries));
  }
  return out;
}

}  // namespace vc::cli
