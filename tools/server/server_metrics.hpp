// GET /metrics: Prometheus text in the style of vLLM (names prefixed "vericache:").
// Counts, gauges, busy fractions, tier bytes and fast memory are read from the
// engine's own counters (EngineStats) at scrape time; what only a front end sees —
// when each token reached it (time to first token, inter-token latency) and each
// finished request's accepted-per-round histogram (acceptance per draft position)
// — is recorded here as requests run.
#pragma once
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include <vericache/engine.hpp>

namespace vc::server {

/// A Prometheus histogram with fixed upper bounds (seconds).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1) {}
  void observe(double v);
  /// The series lines (_bucket{le=...}, _sum, _count) of metric `name`.
  [[nodiscard]] std::string text(const std::string& name) const;

 private:
  mutable std::mutex mu_;
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; last = +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

class ServerMetrics {
 public:
  ServerMetrics();
  using clock = std::chrono::steady_clock;
  void observe_ttft(double seconds) { ttft_.observe(seconds); }
  void observe_itl(double seconds) { itl_.observe(seconds); }
  void observe_e2e(double seconds) { e2e_.observe(seconds); }
  /// A finished request: its outcome ("stop", "length", "cancelled", "error",
  /// "rejected") and, for vericache mode, its accepted-per-round histogram.
  void on_finished(const std::string& outcome, const std::vector<size_t>& accepted_histogram);
  /// The whole exposition, with `engine` read just now; `placement` (the engine's
  /// Engine::placement(), empty when none was applied) as one gauge per actor.
  [[nodiscard]] std::string render(const vericache::EngineStats& engine,
                                   const std::vector<vericache::PlacementLine>& placement = {}) const;

 private:
  Histogram ttft_, itl_, e2e_;
  mutable std::mutex mu_;
  std::vector<uint64_t> accepted_at_;     // [position] rounds whose draft at it was accepted
  std::vector<std::pair<std::string, uint64_t>> outcomes_;
};

/// Per-request token timing for the metrics: call on_token from the token
/// callback (the engine's thread); cheap.
class TokenTimer {
 public:
  explicit TokenTimer(ServerMetrics* m) : m_(m), start_(ServerMetrics::clock::now()), last_(start_) {}
  void on_token();
  [[nodiscard]] double since_start() const;

 private:
  ServerMetrics* m_;
  ServerMetrics::clock::time_point start_, last_;
  bool first_ = true;
};

}  // namespace vc::server
