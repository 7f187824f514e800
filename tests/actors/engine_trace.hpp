// Reading an Engine's trace in tests: the engine's Chrome trace-event JSON, and
// whether an event names a request (its "request" arg: one id or a list).
#pragma once
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>

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

/// A long request's prefill slices, and another request's draft steps between the
/// first slice's start and the last one's end.
struct PrefillWindow {
  size_t prefill_slices = 0;
  size_t steps_inside = 0;
};
inline PrefillWindow prefill_window(const nlohmann::json& trace, uint64_t decoding, uint64_t long_id) {
  PrefillWindow w;
  double first = 1e300, last = -1e300;
  for (const auto& e : trace["traceEvents"])
    if (slice_of(e, "prefill", long_id)) {
      ++w.prefill_slices;
      first = std::min(first, e["ts"].get<double>());
      last = std::max(last, e["ts"].get<double>() + e["dur"].get<double>());
    }
  for (const auto& e : trace["traceEvents"])
    if (slice_of(e, "draft step", decoding) && e["ts"].get<double>() > first && e["ts"].get<double>() < last)
      ++w.steps_inside;
  return w;
}

}  // namespace vc::test
