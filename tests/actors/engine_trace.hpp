// Reading an Engine's trace in tests: the engine's Chrome trace-event JSON, and
// whether an event names a request (its "request" arg: one id or a list).
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <vericache/engine.hpp>

#include "tests/runtime/test_support.hpp"

namespace vc::test {

/// The engine's trace so far (written to a temporary file, read, removed).
inline nlohmann::json engine_trace(vericache::Engine& engine) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("vericache-engine-trace-" + std::to_string(::getpid()) + ".json");
  engine.write_trace(path.string());
  nlohmann::json j = read_json(path.string());
  std::filesystem::remove(path);
  return j;
}

/// A complete ("X") event named `name` that names request `id`.
inline bool slice_of(const nlohmann::json& e, const char* name, uint64_t id) {
  if (e["ph"] != "X" || e["name"] != name || !e.contains("args")) return false;
  const auto& r = e["args"]["request"];
  if (r.is_number()) return r.get<uint64_t>() == id;
  return r.is_array() &&
         std::any_of(r.begin(), r.end(), [&](const auto& x) { return x.template get<uint64_t>() == id; });
}

/// Request `id`'s slices named `name` in `trace`.
inline size_t count_slices(const nlohmann::json& trace, const char* name, uint64_t id) {
  size_t n = 0;
  for (const auto& e : trace["traceEvents"]) n += slice_of(e, name, id);
  return n;
}

/// A long request's prefill slices (`name`: "prefill", or "exact prefill" for a
/// compressed-first request's), and another request's draft steps between the
/// first slice's start and the last one's end.
struct PrefillWindow {
  size_t prefill_slices = 0;
  size_t steps_inside = 0;
};
inline PrefillWindow prefill_window(const nlohmann::json& trace, uint64_t decoding, uint64_t long_id,
                                    const char* name = "prefill") {
  PrefillWindow w;
  double first = 1e300, last = -1e300;
  for (const auto& e : trace["traceEvents"])
    if (slice_of(e, name, long_id)) {
      ++w.prefill_slices;
      first = std::min(first, e["ts"].get<double>());
      last = std::max(last, e["ts"].get<double>() + e["dur"].get<double>());
    }
  for (const auto& e : trace["traceEvents"])
    if (slice_of(e, "draft step", decoding) && e["ts"].get<double>() > first && e["ts"].get<double>() < last)
      ++w.steps_inside;
  return w;
}

/// Request `folding`'s view rebuilds (folds) in an engine's trace, beside request
/// `other`'s draft steps: the fold slices, how many folds (runs of `per_fold`
/// slices in time order) had one of the other request's steps inside, and how many
/// had one of the folding request's own.
struct FoldWindows {
  size_t slices = 0;
  size_t with_other_steps = 0;
  size_t with_own_steps = 0;
};
inline FoldWindows fold_windows(const nlohmann::json& trace, uint64_t folding, uint64_t other,
                                size_t per_fold) {
  std::vector<std::pair<double, double>> slices;
  std::vector<double> steps, own_steps;  // draft steps' starts: the other's, its own
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    const double ts = e["ts"].get<double>();
    if (slice_of(e, "fold", folding)) slices.emplace_back(ts, ts + e["dur"].get<double>());
    if (slice_of(e, "draft step", other)) steps.push_back(ts);
    if (slice_of(e, "draft step", folding)) own_steps.push_back(ts);
  }
  std::sort(slices.begin(), slices.end());
  FoldWindows w;
  w.slices = slices.size();
  for (size_t f = 0; per_fold > 0 && f + per_fold <= slices.size(); f += per_fold) {
    const double from = slices[f].first, to = slices[f + per_fold - 1].second;
    const auto inside = [&](double t) { return t > from && t < to; };
    w.with_other_steps += std::any_of(steps.begin(), steps.end(), inside);
    w.with_own_steps += std::any_of(own_steps.begin(), own_steps.end(), inside);
  }
  return w;
}

/// Folds sliced a layer each: at least two whole folds of `per_fold` slices, none
/// with a step of the folding request inside, one at least with the other's.
inline void expect_folds_sliced(const FoldWindows& w, size_t per_fold) {
  EXPECT_GE(w.slices, 2 * per_fold) << "folds in slices of a layer";
  EXPECT_EQ(0u, w.slices % per_fold) << "whole folds of " << per_fold << " slices";
  EXPECT_EQ(0u, w.with_own_steps) << "the folding request stepped during its own fold";
  EXPECT_GE(w.with_other_steps, 1u) << "the other request's steps between a fold's slices";
}

}  // namespace vc::test
