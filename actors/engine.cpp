// vericache::Engine: builds the shared resources, spawns one actor per resource and
// talks to the scheduler. Shutdown order matters (DEPENDENCIES.md): every actor
// handle is dropped before the actor system is destroyed, or its destructor hangs.
#include "actors/vericache/engine.hpp"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <filesystem>

#include "actors/net_fetcher.hpp"
#include "actors/protocol.hpp"
#include "actors/scheduler.hpp"
#include "actors/workers.hpp"
#include "kernels/error.hpp"
#include "kvtiers/fast_memory.hpp"
#include "kvtiers/full_tier.hpp"
#include "runtime/fast_memory_need.hpp"
#include "runtime/forward.hpp"
#include "runtime/model.hpp"
#include "runtime/model/tokenizer.hpp"
#include "runtime/remote_prefix.hpp"
#include "runtime/request_validation.hpp"


namespace vericache {

using namespace vc;

struct Engine::Impl {
  EngineConfig cfg;
  std::shared_ptr<const Model> model;
  std::shared_ptr<const Tokenizer> tokenizer;
  std::unique_ptr<FullTier> tier;
  std::unique_ptr<FastMemory> fast;      // the fast-memory budget, charged by all below
  KvCacheConfig kv;
  size_t request_budget = 0;             // fast memory left for requests' needs
  std::shared_ptr<DraftBatcher> batcher;
  std::shared_ptr<LayerStreamer> streamer;
  std::shared_ptr<TraceRecorder> trace;
  std::unique_ptr<caf::actor_system_config> sys_cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::shared_ptr<RemoteTier> remote;    // EngineConfig::remote_url (else null)
  caf::actor sched, drafter, mover, verifier, net_fetcher;
  std::atomic<uint64_t> next_id{1};
  std::shared_ptr<actors::LiveCounters> counters = std::make_shared<actors::LiveCounters>();
  TraceRecorder::time_point started = TraceRecorder::clock::now();
};

namespace {

Result failed_result(uint64_t id, const std::string& error) {
  Result r;
  r.id = id;
  r.ok = false;
  r.finish_reason = "error";
  r.error = error;
  return r;
}

// The embedding API's request, as the shared validation layer reads it.
RequestInput to_input(const Request& r) {
  RequestInput in;
  in.prompt = r.prompt;
  in.prompt_ids = r.prompt_ids;
  in.max_tokens = r.max_tokens;
  in.mode = r.mode;
  in.compressor = r.compressor;
  in.compressor_params = r.compressor_params;
  in.ratio = r.ratio;
  in.draft = r.draft;
  in.fold_every = int64_t(std::min<size_t>(r.fold_every, size_t(INT64_MAX)));
  in.draft_hierarchy = r.draft_hierarchy;
  in.ngram_min = int64_t(std::min<size_t>(r.ngram_min, size_t(INT64_MAX)));
  in.ngram_max = int64_t(std::min<size_t>(r.ngram_max, size_t(INT64_MAX)));
  in.ngram_proposal = int64_t(std::min<size_t>(r.ngram_proposal, size_t(INT64_MAX)));
  in.temperature = r.temperature;
  in.top_k = r.top_k;
  in.top_p = r.top_p;
  in.seed = r.seed;
  in.stop = r.stop;
  in.ignore_eos = r.ignore_eos;
  in.top_logprobs = r.top_logprobs;
  return in;
}

}  // namespace

Engine::Engine(const EngineConfig& cfg) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.cfg = cfg;
  if (cfg.kv_dtype != "bf16" && cfg.kv_dtype != "f32")
    throw Error("EngineConfig.kv_dtype: expected bf16 or f32, got '" + cfg.kv_dtype + "'");
  if (cfg.full_tier != "host" && cfg.full_tier != "disk")
    throw Error("EngineConfig.full_tier: expected host or disk, got '" + cfg.full_tier + "'");
  if (cfg.max_active == 0) throw Error("EngineConfig.max_active: must be at least 1");
  m.model = Model::load(cfg.model_dir);
  m.tokenizer = std::make_shared<const Tokenizer>(
      Tokenizer::from_file(std::filesystem::path(cfg.model_dir) / "tokenizer.json"));
  const DType kv = cfg.kv_dtype == "f32" ? DType::f32 : DType::bf16;
  const KvCacheConfig kvc = m.model->kv_config(16, kv);
  m.kv = kvc;
  const size_t per_token = 2 * kvc.num_layers * kvc.kv_heads * kvc.head_dim * dtype_size(kv);
  const size_t budget = cfg.fast_memory_bytes > 0 ? cfg.fast_memory_bytes : (size_t(1) << 16) * per_token;
  const size_t overhead = engine_fast_overhead(kvc, cfg.stage_positions);
  if (budget <= overhead)
    throw Error("EngineConfig.fast_memory_bytes: " + format_bytes(budget) +
                " does not cover the staging buffers of the verify and prefill passes (" +
                format_bytes(overhead) + ")");
  m.fast = std::make_unique<FastMemory>(budget);
  m.request_budget = budget - overhead;
  if (cfg.full_tier == "disk") {
    m.tier = std::make_unique<DiskFullTier>(kvc, cfg.disk_dir);  // private dir under it
  } else {
    m.tier = std::make_unique<HostFullTier>(kvc);
  }
  m.tier->set_capacity_bytes(cfg.full_tier_bytes);
  if (!cfg.remote_url.empty()) {
    try {
      m.remote = open_remote_tier({cfg.remote_url, cfg.remote_chunk_tokens, cfg.remote_ttl_seconds,
                                   cfg.remote_timeout_ms, cfg.remote_retry_ms},
                                  kvc, cfg.model_dir);
    } catch (const std::exception& e) {
      throw Error(std::string("EngineConfig.remote_url: ") + e.what());
    }
  }
  m.trace = std::make_shared<TraceRecorder>(cfg.trace);
  // The block pool can never hold more than the budget: every block is charged.
  const size_t pool_tokens = budget / per_token + kvc.block_tokens;
  auto batcher = std::make_shared<DraftBatcher>(m.model, m.tier.get(), pool_tokens, kv,
                                                cfg.threads, m.fast.get(), cfg.stage_positions);
  auto streamer = std::make_shared<LayerStreamer>(*m.tier, cfg.stage_positions);
  streamer->set_link_bandwidth(cfg.link_bytes_per_second);
  streamer->set_budget(m.fast.get());
  m.batcher = batcher;
  m.streamer = streamer;
  auto verifier = std::make_shared<Verifier>(m.model, cfg.threads);

  m.sys_cfg = std::make_unique<caf::actor_system_config>();
  m.sys_cfg->set("scheduler.max-threads", 2);
  m.sys_cfg->set("logger.console", caf::atom("none"));
  m.sys = std::make_unique<caf::actor_system>(*m.sys_cfg);
  m.sched = m.sys->spawn(actors::scheduler, cfg.max_active, cfg.max_queue, cfg.lockstep,
                         m.tokenizer.get(), m.counters, m.request_budget, cfg.full_tier_bytes,
                         m.tier.get(), m.remote ? m.remote->layout().chunk_tokens : size_t(0));
  m.drafter = m.sys->spawn<caf::detached>(actors::drafter, batcher, m.sched, m.trace);
  m.mover = m.sys->spawn<caf::detached>(actors::mover, m.tier.get(), streamer, m.trace);
  m.verifier = m.sys->spawn<caf::detached>(actors::verifier, verifier, m.mover, m.sched, m.trace);
  if (m.remote)  // detached: a fetch blocks on the store
    m.net_fetcher = m.sys->spawn<caf::detached>(actors::net_fetcher, m.remote);
  caf::anon_send(m.sched, actors::wire_msg{m.drafter, m.verifier, m.mover, m.net_fetcher});
}

Engine::~Engine() {
  Impl& m = *impl_;
  if (!m.sys) return;
  {
    caf::scoped_actor self{*m.sys};
    self->request(m.sched, std::chrono::seconds(30), actors::shutdown_msg{})
        .receive([](bool) {}, [](caf::error&) {});
    for (auto* a : {&m.sched, &m.drafter, &m.mover, &m.verifier, &m.net_fetcher})
      if (*a) self->send_exit(*a, caf::exit_reason::user_shutdown);
  }
  m.sched = m.drafter = m.mover = m.verifier = m.net_fetcher = caf::actor{};
  m.sys.reset();  // waits for every actor to finish
  m.remote.reset();  // sends what its write-behind queue still holds, then stops
}

Engine::Submission Engine::submit(const Request& r, TokenCallback on_token) {
  TokenDetailCallback detail;
  if (on_token)
    detail = [cb = std::move(on_token)](uint64_t id, const EmittedToken& t) { cb(id, t.id); };
  return submit(r, std::move(detail));
}

Engine::Submission Engine::submit(const Request& r, TokenDetailCallback on_token) {
  Impl& m = *impl_;
  auto ctx = std::make_shared<actors::RequestCtx>();
  ctx->id = m.next_id++;
  ctx->on_token = std::move(on_token);
  Submission sub{ctx->id, ctx->promise.get_future()};
  try {
    DraftSpec& s = ctx->spec;
    // Every check of the request is the shared one (runtime/request_validation.hpp).
    const ValidRequest v =
        validate_request(to_input(r), RequestLimits::of(m.model->config()), m.tokenizer.get());
    const GenerateOptions& o = v.options;
    s = make_draft_spec(ctx->id, v.prompt_ids, o);
    // Admission by memory: reserve what the request can grow to; a request that
    // could never fit alone fails now, naming the sizes.
    const FastNeed need = fast_memory_need(s, m.kv, o.draft_auto ? 64 : o.draft_length);
    if (need.total() > m.request_budget)
      throw Error("request: needs " + need.describe() + " of fast memory, more than the " +
                  format_bytes(m.request_budget) + " the engine's budget (" +
                  format_bytes(m.fast->capacity()) + ") leaves for requests");
    ctx->fast_need = need.total();
    if (s.mode != DecodeMode::full) {  // its full KV in the full tier, at most
      ctx->tier_need = (s.prompt.size() + s.max_new_tokens + 1) * m.tier->bytes_per_token();
      if (m.cfg.full_tier_bytes > 0 && ctx->tier_need > m.cfg.full_tier_bytes)
        throw Error("request: its full KV needs " + format_bytes(ctx->tier_need) + " in the " +
                    m.cfg.full_tier + " full tier, more than its budget of " +
                    format_bytes(m.cfg.full_tier_bytes));
    }
    ctx->result.stats.fast_bytes_reserved = need.total();
    if (m.remote && s.mode != DecodeMode::full) {
      ctx->remote = true;
      ctx->remote_limit =
          remote_prefix_limit(*make_compressor(s.compressor, s.compressor_params), s.prompt.size(),
                              s.stats_window);
    }
    ctx->policy = o.draft_auto ? DraftLengthPolicy::adaptive(64)
                               : DraftLengthPolicy::fixed(o.draft_length);
    if (o.draft_auto && !r.row_costs.empty()) {
      std::vector<RowCostPoint> curve;
      for (const auto& [rows, seconds] : r.row_costs) curve.push_back({rows, seconds});
      ctx->policy.set_row_costs(std::move(curve));
    }
    ctx->stop.max_tokens = size_t(o.max_tokens);
    if (o.stop_at_eos)
      for (int e : m.model->config().eos_token_ids) ctx->stop.eos_ids.push_back(e);
    ctx->stop.stop = o.stop;
    ctx->stop.tokenizer = m.tokenizer.get();
    ctx->result.id = ctx->id;
    ctx->result.prompt_ids = s.prompt;
  } catch (const std::exception& e) {
    ctx->promise.set_value(failed_result(ctx->id, e.what()));
    return sub;
  }
  caf::anon_send(m.sched, actors::submit_msg{std::move(ctx)});
  return sub;
}

void Engine::cancel(uint64_t id) { caf::anon_send(impl_->sched, actors::cancel_msg{id}); }

EngineStats Engine::stats() {
  // No message to the scheduler: the counters are atomics it updates, so this
  // answers at once from any thread, token callbacks (the scheduler thread) included.
  Impl& m = *impl_;
  EngineStats s;
  const actors::SchedulerCounters c = m.counters->snapshot();
  s.submitted = c.submitted;
  s.completed = c.completed;
  s.failed = c.failed;
  s.cancelled = c.cancelled;
  s.rejected = c.rejected;
  s.tokens = c.tokens;
  s.running = c.running;
  s.waiting = c.waiting;
  s.prompt_tokens = c.prompt_tokens;
  s.drafted_tokens = c.drafted;
  s.accepted_tokens = c.accepted;
  const auto now = TraceRecorder::clock::now();
  s.seconds = std::chrono::duration<double>(now - m.started).count();
  s.busy_fraction = m.trace->busy_fraction(m.started, now);
  const TierBytes b = m.tier->bytes();
  s.full_tier_bytes_read = b.read;
  s.full_tier_bytes_written = b.written;
  s.full_tier_bytes_held = b.held;
  s.full_tier_bytes_read_verify = m.streamer->bytes_streamed();
  s.full_tier_bytes_read_prefill = m.batcher->prefill_bytes_streamed();
  const size_t streamed = s.full_tier_bytes_read_verify + s.full_tier_bytes_read_prefill;
  s.full_tier_bytes_read_refold = b.read > streamed ? b.read - streamed : 0;
  s.fast_memory_budget = m.fast->capacity();
  s.fast_memory_used = m.fast->used();
  s.fast_memory_peak = m.fast->peak();
  s.fast_memory_reserved = m.counters->fast_reserved.load(std::memory_order_relaxed);
  return s;
}

void Engine::write_trace(const std::string& path) { impl_->trace->write_chrome_trace(path); }

std::string Engine::decode(const std::vector<int32_t>& ids) const {
  return impl_->tokenizer->decode(ids, true);
}

}  // namespace vericache
