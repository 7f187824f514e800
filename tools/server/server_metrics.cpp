// Prometheus exposition of the server (server_metrics.hpp).
#include "tools/server/server_metrics.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace vc::server {

namespace {

std::string num(double v) { return fmt::format("{}", v); }

void head(std::string& out, const std::string& name, const char* type, const char* help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

void one(std::string& out, const std::string& name, const char* type, const char* help, double v) {
  head(out, name, type, help);
  out += fmt::format("{} {}\n", name, num(v));
}

}  // namespace

void Histogram::observe(double v) {
  std::lock_guard lock(mu_);
  const size_t b = size_t(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  ++counts_[b];
  sum_ += v;
  ++count_;
}

std::string Histogram::text(const std::string& name) const {
  std::lock_guard lock(mu_);
  std::string out;
  uint64_t cum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, num(bounds_[i]), cum);
  }
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, count_, name,
                     num(sum_), name, count_);
  return out;
}

ServerMetrics::ServerMetrics()
    : ttft_({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
             7.5, 10.0, 20.0, 40.0, 80.0}),
      itl_({0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3,
            0.4, 0.5, 0.75, 1.0, 2.5}),
      e2e_({0.01, 0.05, 0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
            40.0, 50.0, 60.0}) {
  for (const char* o : {"stop", "length", "cancelled", "error", "rejected"}) outcomes_.emplace_back(o, 0);
}

void ServerMetrics::on_finished(const std::string& outcome,
                                const std::vector<size_t>& accepted_histogram) {
  std::lock_guard lock(mu_);
  for (auto& [name, n] : outcomes_)
    if (name == outcome) ++n;
  // h[k] rounds accepted exactly k drafts: position p was accepted in sum_{k>p} h[k].
  for (size_t k = 1; k < accepted_histogram.size(); ++k) {
    if (accepted_at_.size() < k) accepted_at_.resize(k, 0);
    for (size_t p = 0; p < k; ++p) accepted_at_[p] += accepted_histogram[k];
  }
}

std::string ServerMetrics::render(const vericache::EngineStats& s,
                                  const std::vector<vericache::PlacementLine>& placement) const {
  std::string out;
  one(out, "vericache:num_requests_running", "gauge", "Requests decoding (prefill, draft, verify) now.",
      double(s.running));
  one(out, "vericache:num_requests_waiting", "gauge", "Requests queued for admission now.",
      double(s.waiting));
  one(out, "vericache:prompt_tokens_total", "counter", "Prompt tokens of admitted requests.",
      double(s.prompt_tokens));
  one(out, "vericache:generation_tokens_total", "counter", "Tokens generated.", double(s.tokens));
  head(out, "vericache:request_success_total", "counter",
       "Requests finished by the server, by finish reason.");
  {
    std::lock_guard lock(mu_);
    for (const auto& [name, n] : outcomes_)
      out += fmt::format("vericache:request_success_total{{finished_reason=\"{}\"}} {}\n", name, n);
  }
  head(out, "vericache:engine_requests_total", "counter", "Requests by engine outcome.");
  out += fmt::format(
      "vericache:engine_requests_total{{outcome=\"submitted\"}} {}\n"
      "vericache:engine_requests_total{{outcome=\"completed\"}} {}\n"
      "vericache:engine_requests_total{{outcome=\"failed\"}} {}\n"
      "vericache:engine_requests_total{{outcome=\"cancelled\"}} {}\n"
      "vericache:engine_requests_total{{outcome=\"rejected\"}} {}\n",
      s.submitted, s.completed, s.failed, s.cancelled, s.rejected);
  head(out, "vericache:time_to_first_token_seconds", "histogram",
       "From submission to the first token reaching the server.");
  out += ttft_.text("vericache:time_to_first_token_seconds");
  head(out, "vericache:inter_token_latency_seconds", "histogram",
       "Between consecutive tokens of a request reaching the server (tokens of one verify "
       "round arrive together).");
  out += itl_.text("vericache:inter_token_latency_seconds");
  head(out, "vericache:e2e_request_latency_seconds", "histogram", "From submission to the result.");
  out += e2e_.text("vericache:e2e_request_latency_seconds");
  one(out, "vericache:spec_decode_num_draft_tokens_total", "counter",
      "Draft tokens verified (vericache mode).", double(s.drafted_tokens));
  one(out, "vericache:spec_decode_num_accepted_tokens_total", "counter",
      "Draft tokens accepted by verification.", double(s.accepted_tokens));
  head(out, "vericache:spec_decode_num_accepted_tokens_per_pos", "counter",
       "Rounds whose draft at this position (0 = first) was accepted, over finished requests.");
  {
    std::lock_guard lock(mu_);
    for (size_t p = 0; p < accepted_at_.size(); ++p)
      out += fmt::format("vericache:spec_decode_num_accepted_tokens_per_pos{{position=\"{}\"}} {}\n",
                         p, accepted_at_[p]);
  }
  head(out, "vericache:resource_busy_fraction", "gauge",
       "Share of the time since start each resource (actor) was busy.");
  for (const auto& [name, f] : s.busy_fraction)
    out += fmt::format("vericache:resource_busy_fraction{{resource=\"{}\"}} {}\n", name, num(f));
  one(out, "vericache:fast_memory_used_bytes", "gauge", "KV bytes in fast memory now.",
      double(s.fast_memory_used));
  one(out, "vericache:fast_memory_peak_bytes", "gauge", "Most KV bytes in fast memory so far.",
      double(s.fast_memory_peak));
  one(out, "vericache:fast_memory_reserved_bytes", "gauge",
      "Fast-memory bytes admission reserved for the running requests.", double(s.fast_memory_reserved));
  one(out, "vericache:fast_memory_budget_bytes", "gauge", "The fast-memory budget.",
      double(s.fast_memory_budget));
  one(out, "vericache:kv_cache_usage_perc", "gauge", "Fast memory used over its budget (0..1).",
      s.fast_memory_budget ? double(s.fast_memory_used) / double(s.fast_memory_budget) : 0.0);
  one(out, "vericache:full_tier_bytes_held", "gauge", "Bytes of full KV held in the full tier now.",
      double(s.full_tier_bytes_held));
  head(out, "vericache:full_tier_bytes_read_total", "counter", "Bytes read from the full tier, by use.");
  out += fmt::format(
      "vericache:full_tier_bytes_read_total{{use=\"verify\"}} {}\n"
      "vericache:full_tier_bytes_read_total{{use=\"prefill\"}} {}\n"
      "vericache:full_tier_bytes_read_total{{use=\"refold\"}} {}\n",
      s.full_tier_bytes_read_verify, s.full_tier_bytes_read_prefill, s.full_tier_bytes_read_refold);
  one(out, "vericache:full_tier_bytes_written_total", "counter", "Bytes written to the full tier.",
      double(s.full_tier_bytes_written));
  if (!placement.empty()) {  // --placement auto: whether each actor's threads run as planned
    head(out, "vericache:thread_placement_applied", "gauge",
         "1 when every thread of the actor was bound where the placement plan puts it.");
    for (const auto& p : placement)
      out += fmt::format("vericache:thread_placement_applied{{actor=\"{}\"}} {}\n", p.what,
                         p.applied ? 1 : 0);
  }
  return out;
}

void TokenTimer::on_token() {
  const auto now = ServerMetrics::clock::now();
  if (m_ != nullptr) {
    if (first_) m_->observe_ttft(std::chrono::duration<double>(now - start_).count());
    else m_->observe_itl(std::chrono::duration<double>(now - last_).count());
  }
  first_ = false;
  last_ = now;
}

double TokenTimer::since_start() const {
  return std::chrono::duration<double>(ServerMetrics::clock::now() - start_).count();
}

}  // namespace vc::server
