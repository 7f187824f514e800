// vericache::Engine: builds the shared resources, spawns one actor per resource and
// talks to the scheduler. Shutdown order matters (DEPENDENCIES.md): every actor
// handle is dropped before the actor system is destroyed, or its destructor hangs.
#include "actors/vericache/engine.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <new>
#include <stdexcept>
#include <optional>

#include <fmt/format.h>

#include "actors/full_tier_placement.hpp"
#include "actors/net_fetcher.hpp"
#include "actors/protocol.hpp"
#include "actors/scheduler.hpp"
#include "actors/workers.hpp"
#include "kernels/error.hpp"
#include "kvtiers/fast_memory.hpp"
#include "kvtiers/full_tier.hpp"
#include "runtime/fast_memory_need.hpp"
#include "runtime/forward.hpp"
#include "runtime/layer_streamer.hpp"
#include "runtime/model.hpp"
#include "runtime/model/tokenizer.hpp"
#include "runtime/remote_prefix.hpp"
#include "runtime/request_validation.hpp"
#include "runtime/tp_comm.hpp"
#include "runtime/tp_draft_batcher.hpp"
#include "runtime/tp_verifier.hpp"
#include "runtime/device.hpp"
#include "topology/binding.hpp"
#include "topology/hwloc_topology.hpp"
#include "topology/placement_binder.hpp"


namespace vericache {

using namespace vc;

// Tensor parallelism (EngineConfig::tp): one drafter, verifier and mover actor per
// group, each driving every rank. A rank has its own shard of every tier (its fast
// memory, its full tier, its streamer). The drafter and the verifier run passes at
// the same time, so their collectives must never meet: each has its own
// communicator and so its own shard models; a rank's verifier shard is its drafter
// shard over the other communicator (Model::with_comm), so the rank's weights, the
// copied o_proj and down_proj columns included, are held once.
struct Engine::Impl {
  EngineConfig cfg;
  std::shared_ptr<const Model> model;    // unsharded
  std::shared_ptr<const Tokenizer> tokenizer;
  std::vector<std::unique_ptr<FullTier>> tiers;    // per rank
  std::vector<std::unique_ptr<FastMemory>> fast;   // per rank: its fast-memory budget
  KvCacheConfig kv;                      // a rank's KV layout
  size_t request_budget = 0;             // fast memory (per rank) left for requests' needs
  std::shared_ptr<TpDraftBatcher> batcher;
  StreamerLanes streamers;  // the verifier's lanes, one streamer per rank each
  std::shared_ptr<TraceRecorder> trace;
  std::unique_ptr<caf::actor_system_config> sys_cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::shared_ptr<RemoteTier> remote;    // EngineConfig::remote_url (else null): rank 0's
  /// Per net_fetcher, per rank (remotes[0][0] == remote); all share one StoreHealth.
  std::vector<std::vector<std::shared_ptr<RemoteTier>>> remotes;
  caf::actor sched, drafter, mover, verifier;
  std::vector<caf::actor> net_fetchers;
  /// Held while a submit or cancel sends to the scheduler and while ~Engine marks
  /// the engine closing: a message sent before that is in the scheduler's mailbox
  /// ahead of its shutdown; a later submit resolves at once (a token callback may
  /// submit while the engine is destroyed).
  std::mutex send_mu;
  bool closing = false;
  std::atomic<uint64_t> next_id{1};
  std::shared_ptr<actors::LiveCounters> counters = std::make_shared<actors::LiveCounters>();
  std::vector<PlacementLine> placement;  // EngineConfig::placement "auto": what was bound
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
  if (cfg.verify_batch == 0 || cfg.verify_batch > 64)
    throw Error("EngineConfig.verify_batch: must be 1 to 64, got " + std::to_string(cfg.verify_batch));
  if (cfg.tp < 1) throw Error("EngineConfig.tp: must be at least 1, got " + std::to_string(cfg.tp));
  if (cfg.threads < 0 || cfg.threads > 1024)
    throw Error("EngineConfig.threads: must be 0 (auto) to 1024, got " + std::to_string(cfg.threads));
  if (!(cfg.link_bytes_per_second >= 0) || !std::isfinite(cfg.link_bytes_per_second))
    throw Error(fmt::format("EngineConfig.link_bytes_per_second: must be 0 (unthrottled) or positive "
                            "and finite, got {:g}", cfg.link_bytes_per_second));
  if (!cfg.remote_url.empty()) {
    try {
      check_remote_settings(cfg.remote_ttl_seconds, cfg.remote_timeout_ms, cfg.remote_retry_ms);
    } catch (const std::exception& e) {
      throw Error(std::string("EngineConfig.") + e.what());
    }
  }
  if (cfg.prefill_chunk < 1 || cfg.prefill_chunk > 65536)
    throw Error("EngineConfig.prefill_chunk: must be 1 to 65536 tokens, got " + std::to_string(cfg.prefill_chunk));
  if (cfg.stage_positions > (size_t(1) << 24))  // as --stage-positions; rounding it up must not wrap
    throw Error("EngineConfig.stage_positions: must be 0 (whole layers) to 16777216 positions, got " +
                std::to_string(cfg.stage_positions));
  Device device;
  try {
    device = parse_device(cfg.device);
  } catch (const std::exception& e) {
    throw Error(std::string("EngineConfig.") + e.what());
  }
  if (!device.is_cpu() && cfg.tp > 1)
    throw Error("EngineConfig.device: " + device.str() +
                " with tp > 1: tensor-parallel ranks run on the CPU only (for now)");
  if (cfg.placement != "none" && cfg.placement != "auto")
    throw Error("EngineConfig.placement: expected none or auto, got '" + cfg.placement + "'");
  // Used while the actors bind their threads, at the end of the constructor, and by
  // the host tiers' memory placers (which hold it).
  std::shared_ptr<HwlocTopology> topology;
  std::shared_ptr<PlacementBinder> binder;
  Topology seen;  // this machine, GPUs included
  if (cfg.placement == "auto") {
    try {  // the plan first: a degree the machine cannot place fails before any actor
      topology = std::make_shared<HwlocTopology>();
      // The ranks compute on the CPU (only a tp-1 engine's weight products can go to
      // a GPU): plan CPU ranks, whatever GPUs the machine has.
      seen = topology->read();
      Topology cpu_ranks = seen;
      cpu_ranks.gpus.clear();
      cpu_ranks.links.clear();
      binder = std::make_shared<PlacementBinder>(*topology, plan_placement(cpu_ranks, size_t(cfg.tp)));
    } catch (const std::exception& e) {
      throw Error(std::string("EngineConfig.placement: ") + e.what());
    }
  }
  const size_t d = size_t(cfg.tp);
  m.model = Model::load(cfg.model_dir);
  try {
    m.model = Model::on_device(std::move(m.model), device);
  } catch (const std::exception& e) {
    throw Error(std::string("EngineConfig.") + e.what());
  }
  m.tokenizer = std::make_shared<const Tokenizer>(
      Tokenizer::from_file(std::filesystem::path(cfg.model_dir) / "tokenizer.json"));
  // Rank r's shard for the drafter and for the verifier (see Impl).
  std::vector<std::shared_ptr<const Model>> draft_shards, verify_shards;
  std::shared_ptr<Communicator> draft_comm, verify_comm;
  if (d == 1) {
    draft_shards = verify_shards = {m.model};
  } else {
    draft_comm = std::make_shared<CpuCommunicator>(cfg.tp);
    verify_comm = std::make_shared<CpuCommunicator>(cfg.tp);
    try {
      for (int r = 0; r < cfg.tp; ++r) {
        draft_shards.push_back(Model::shard(m.model, r, draft_comm));
        verify_shards.push_back(Model::with_comm(draft_shards.back(), verify_comm));
      }
    } catch (const std::exception& e) {
      throw Error(std::string("EngineConfig.tp: ") + e.what());
    }
  }
  const int threads =
      cfg.threads > 0 ? cfg.threads : (d > 1 ? std::max(1, default_thread_count() / cfg.tp) : 0);
  const DType kv = cfg.kv_dtype == "f32" ? DType::f32 : DType::bf16;
  KvCacheConfig kvc;  // every rank's layout
  try {
    kvc = draft_shards[0]->kv_config(16, kv, cfg.block_tokens);
  } catch (const std::exception& e) {
    throw Error(std::string("EngineConfig.") + e.what());
  }
  m.kv = kvc;
  const size_t per_token = 2 * kvc.num_layers * kvc.kv_heads * kvc.head_dim * dtype_size(kv);
  size_t budget = cfg.fast_memory_bytes > 0 ? cfg.fast_memory_bytes : (size_t(1) << 16) * per_token;
  if (cfg.fast_memory_bytes == 0 && !device.is_cpu()) {  // fast memory is the GPU's
    try {
      budget = device_kv_budget(cuda_memory(device.index), cfg.gpu_memory_utilization, device.str(),
                                host_available_memory());
    } catch (const std::exception& e) {
      throw Error(std::string("EngineConfig.gpu_memory_utilization: ") + e.what());
    }
  }
  const size_t overhead = engine_fast_overhead(kvc, cfg.stage_positions, cfg.verify_batch);
  if (budget <= overhead)
    throw Error(std::string("EngineConfig.fast_memory_bytes: ") +
                (cfg.fast_memory_bytes == 0 ? "its default, " : "") + format_bytes(budget) +
                " does not cover the staging buffers of the verify and prefill passes (" +
                format_bytes(overhead) + (d > 1 ? ", per rank" : "") + ")");
  m.request_budget = budget - overhead;
  for (size_t r = 0; r < d; ++r) {
    m.fast.push_back(std::make_unique<FastMemory>(budget));
    if (cfg.full_tier == "disk")
      m.tiers.push_back(std::make_unique<DiskFullTier>(kvc, cfg.disk_dir));  // private dir under it
    else
      m.tiers.push_back(std::make_unique<HostFullTier>(
          kvc, LayerStreamer::host_tier_chunk_blocks(cfg.stage_positions, kvc.block_tokens)));
    m.tiers.back()->set_capacity_bytes(cfg.full_tier_bytes);
  }
  if (binder) m.placement = actors::place_full_tiers(m.tiers, topology, seen, binder->plan(), device);
  if (!cfg.remote_url.empty()) {
    if (cfg.remote_fetchers < 1)
      throw Error("EngineConfig.remote_fetchers: must be at least 1, got " +
                  std::to_string(cfg.remote_fetchers));
    try {  // each rank's chunks hold its KV heads, under keys of their own
      std::shared_ptr<StoreHealth> health;  // one store: a fault one fetcher sees, all skip
      for (int f = 0; f < cfg.remote_fetchers; ++f) {
        auto& ranks = m.remotes.emplace_back();
        for (size_t r = 0; r < d; ++r) {
          ranks.push_back(open_remote_tier({cfg.remote_url, cfg.remote_chunk_tokens,
                                            cfg.remote_ttl_seconds, cfg.remote_timeout_ms,
                                            cfg.remote_retry_ms, r, d, draft_shards[r]->numerics()},
                                           kvc, cfg.model_dir, health));
          health = ranks.back()->health();
        }
      }
      m.remote = m.remotes[0][0];
    } catch (const std::exception& e) {
      throw Error(std::string("EngineConfig.remote_url: ") + e.what());
    }
  }
  m.trace = std::make_shared<TraceRecorder>(cfg.trace);
  // The block pool can never hold more than the budget: every block is charged.
  const size_t pool_tokens = budget / per_token + kvc.block_tokens;
  std::vector<std::shared_ptr<DraftBatcher>> batchers;
  std::vector<std::shared_ptr<Verifier>> verifiers;
  m.streamers.clear();
  for (size_t k = 0; k < cfg.verify_batch; ++k) m.streamers.push_back(std::make_shared<StreamerGroup>());
  std::vector<FullTier*> tier_ptrs;
  for (size_t r = 0; r < d; ++r) {
    try {
      batchers.push_back(std::make_shared<DraftBatcher>(draft_shards[r], m.tiers[r].get(), pool_tokens,
                                                        kv, threads, m.fast[r].get(),
                                                        cfg.stage_positions, cfg.block_tokens));
    } catch (const std::exception& e) {  // the block pool's index is sized by the budget
      if (!dynamic_cast<const std::bad_alloc*>(&e) && !dynamic_cast<const std::length_error*>(&e)) throw;
      throw Error("EngineConfig.fast_memory_bytes: " + format_bytes(budget) + " would hold " +
                  std::to_string(pool_tokens) + " KV positions, more blocks than this machine can "
                  "index (out of memory)");
    }
    // The rank's lanes share its link (modelled, or the tier's own).
    auto link = cfg.link_bytes_per_second > 0
                    ? std::make_shared<ModelledLink>(cfg.link_bytes_per_second)
                    : nullptr;
    for (auto& lane : m.streamers) {
      auto streamer = std::make_shared<LayerStreamer>(*m.tiers[r], cfg.stage_positions);
      streamer->set_link(link);
      streamer->set_budget(m.fast[r].get());
      lane->ranks.push_back(std::move(streamer));
    }
    verifiers.push_back(std::make_shared<Verifier>(verify_shards[r], threads));
    tier_ptrs.push_back(m.tiers[r].get());
  }
  m.batcher = std::make_shared<TpDraftBatcher>(std::move(batchers), draft_comm);
  auto verifier = std::make_shared<TpVerifier>(std::move(verifiers), verify_comm);

  m.sys_cfg = std::make_unique<caf::actor_system_config>();
  m.sys_cfg->set("scheduler.max-threads", 2);
  m.sys_cfg->set("logger.console", caf::atom("none"));
  // The scheduler actor's workers poll briefly for work, then sleep until a message
  // wakes them: CAF's default (a further 500 polls 50 us apart once idle, after
  // every message) kept preempting the compute threads on a small machine, which
  // cost a long prompt's sliced prefill 1.2x in time to first token on 2 cores
  // (bench interleave: sliced / whole 1.19-1.22x with it, 0.90-1.01x without).
  m.sys_cfg->set("work-stealing.aggressive-poll-attempts", size_t{10});
  m.sys_cfg->set("work-stealing.moderate-poll-attempts", size_t{0});
  m.sys = std::make_unique<caf::actor_system>(*m.sys_cfg);
  m.sched = m.sys->spawn(actors::scheduler, cfg.max_active, cfg.max_queue, cfg.lockstep,
                         m.tokenizer.get(), m.counters, m.request_budget, cfg.full_tier_bytes,
                         m.tiers[0].get(), m.remote ? m.remote->layout().chunk_tokens : size_t(0),
                         cfg.remote_predraft, cfg.remote_fetch_segment);
  // First tokens go to the scheduler once the drafter has the exact logits, before it
  // builds the view (a weak reference: the batcher outlives the actors).
  m.batcher->set_first_token_hook([sched = caf::actor_cast<caf::weak_actor_ptr>(m.sched)](
                                      uint64_t id, int32_t token, float logprob,
                                      std::vector<vc::TokenLogprob> top) {
    if (auto s = caf::actor_cast<caf::strong_actor_ptr>(sched))
      caf::anon_send(caf::actor_cast<caf::actor>(s),
                     actors::first_token_msg{id, token, logprob, std::move(top)});
  });
  m.drafter = m.sys->spawn<caf::detached>(actors::drafter_group, m.batcher, m.sched, m.trace,
                                            cfg.slice_prefill);
  m.mover = m.sys->spawn<caf::detached>(actors::mover_group, tier_ptrs, m.streamers, m.trace);
  m.verifier = m.sys->spawn<caf::detached>(actors::verifier_group, verifier, m.mover, m.sched,
                                           m.trace, cfg.verify_batch);
  for (const auto& ranks : m.remotes)  // detached: a fetch blocks on the store
    m.net_fetchers.push_back(m.sys->spawn<caf::detached>(actors::net_fetcher_group, ranks, tier_ptrs));
  caf::anon_send(m.sched, actors::wire_msg{m.drafter, m.verifier, m.mover, m.net_fetchers});
  if (binder) bind_threads(m, binder);
}

void Engine::bind_threads(Impl& m, const std::shared_ptr<PlacementBinder>& binder) {
  // Each actor binds the threads it owns on its own thread (a thread's memory
  // binding can only be set from itself); the engine waits for every answer, so
  // no request runs on an unbound thread.
  caf::scoped_actor self{*m.sys};
  std::vector<caf::actor> actors{m.drafter, m.verifier, m.mover};
  actors.insert(actors.end(), m.net_fetchers.begin(), m.net_fetchers.end());
  std::string failure;
  for (const auto& a : actors)
    self->request(a, std::chrono::seconds(30), actors::bind_msg{binder})
        .receive([](bool) {}, [&](caf::error& e) { failure = to_string(e); });
  for (const auto& line : binder->report())
    m.placement.push_back({line.what, line.applied, line.detail});
  if (!failure.empty()) m.placement.push_back({"engine", false, "an actor did not bind: " + failure});
}

const std::vector<PlacementLine>& Engine::placement() const { return impl_->placement; }

Engine::~Engine() {
  Impl& m = *impl_;
  if (!m.sys) return;
  {
    std::lock_guard<std::mutex> lock(m.send_mu);
    m.closing = true;
  }
  {
    caf::scoped_actor self{*m.sys};
    self->request(m.sched, std::chrono::seconds(30), actors::shutdown_msg{})
        .receive([](bool) {}, [](caf::error&) {});
    for (auto* a : {&m.sched, &m.drafter, &m.mover, &m.verifier})
      if (*a) self->send_exit(*a, caf::exit_reason::user_shutdown);
    for (auto& a : m.net_fetchers) self->send_exit(a, caf::exit_reason::user_shutdown);
  }
  m.sched = m.drafter = m.mover = m.verifier = caf::actor{};
  m.net_fetchers.clear();
  m.sys.reset();  // waits for every actor to finish
  m.remote.reset();  // each sends what its write-behind queue still holds, then stops
  m.remotes.clear();
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
    s.prefill_chunk = m.cfg.prefill_chunk;
    // The adaptive draft length runs at any degree: the scheduler's one policy per
    // request times the group's passes (rank 0's, which wait in every collective for
    // the slowest rank) and sends every rank the same length.
    // Admission by memory: reserve what the request can grow to; a request that
    // could never fit alone fails now, naming the sizes.
    // At tp > 1 the need is a rank's (m.kv holds a rank's KV heads), as the budget
    // is. A method that ranks tokens model-wide may keep more than a rank's share
    // of the positions on one rank: bound a rank's view as if it kept all of them.
    DraftSpec per_rank = s;
    if (m.cfg.tp > 1 && s.mode != DecodeMode::full &&
        make_compressor(s.compressor, s.compressor_params)->selects_globally())
      per_rank.ratio = std::max(1.0, s.ratio / m.cfg.tp);
    const FastNeed need = fast_memory_need(per_rank, m.kv, o.draft_auto ? 64 : o.draft_length);
    if (need.total() > m.request_budget)
      throw Error("request: needs " + need.describe() + " of fast memory (a prompt of " +
                  std::to_string(s.prompt.size()) + " tokens, up to " +
                  std::to_string(s.max_new_tokens) + " new), more than the " +
                  format_bytes(m.request_budget) + " the engine's budget (" +
                  format_bytes(m.fast[0]->capacity()) +
                  (m.cfg.tp > 1 ? " per rank" : "") + ") leaves for requests");
    ctx->fast_need = need.total();
    if (s.mode != DecodeMode::full) {  // its full KV in the full tier, at most
      ctx->tier_need = (s.prompt.size() + s.max_new_tokens + 1) * m.tiers[0]->bytes_per_token();
      if (m.cfg.full_tier_bytes > 0 && ctx->tier_need > m.cfg.full_tier_bytes)
        throw Error("request: its full KV needs " + format_bytes(ctx->tier_need) + " in the " +
                    m.cfg.full_tier + " full tier, more than its budget of " +
                    format_bytes(m.cfg.full_tier_bytes));
    }
    ctx->result.stats.fast_bytes_reserved = need.total();
    if (m.remote && s.mode != DecodeMode::full) {
      ctx->remote = true;
      const auto compressor = make_compressor(s.compressor, s.compressor_params);
      ctx->remote_limit = remote_prefix_limit(*compressor, s.prompt.size(), s.stats_window);
      ctx->recompute_front = m.cfg.remote_recompute_front || m.cfg.remote_recompute_front_when_idle ||
                             m.cfg.remote_recompute_front_priced;
      ctx->recompute_front_priced = m.cfg.remote_recompute_front_priced && !m.cfg.remote_recompute_front;
      ctx->recompute_front_when_idle = m.cfg.remote_recompute_front_when_idle && !m.cfg.remote_recompute_front &&
                                       !m.cfg.remote_recompute_front_priced;
      ctx->tp_degree = size_t(m.cfg.tp);
      // The view's compressed chunks are published for compressed-first fetches,
      // which a compressor scoring hidden states never makes (remote_prefix.hpp).
      // At tp > 1 each rank publishes and fetches its own view (its KV heads',
      // under its own keys); the drafter group runs every rank's steps at once,
      // so the ranks' head starts stay in step.
      s.copy_view = !compressor->stats_needs().hidden &&
                    s.prompt.size() >= m.remote->layout().chunk_tokens;
      // Compressed first: a fetched view of [0, C) leaves the suffix [C, n) in the
      // tail. The reservation covers a suffix of up to one chunk (the most a whole
      // compressed prefix leaves) and a view as large as a local one's bound; a
      // longer suffix (a prompt extending a cached one) is reserved when the view
      // arrives, if the budget has room then; else, or for a larger view, the full
      // flow runs (the scheduler checks).
      const size_t chunk = m.remote->layout().chunk_tokens;
      if (m.cfg.remote_compressed_first && !compressor->stats_needs().hidden &&
          s.prompt.size() > chunk) {
        ctx->compressed_first = true;
        ctx->view_spec = compressor_spec(s.compressor, s.compressor_params, s.ratio);
        ctx->cf_view_allowance = need.view;
        ctx->cf_suffix_allowance = chunk;
        ctx->cf_suffix_limit = std::max(chunk, m.cfg.remote_compressed_suffix);
        ctx->cf_suffix_bytes = [kv = m.kv](size_t positions) { return tail_blocks_bytes(kv, positions); };
        const size_t extra = tail_blocks_bytes(m.kv, chunk);
        if (need.total() + extra <= m.request_budget) {
          ctx->fast_need += extra;
          ctx->result.stats.fast_bytes_reserved = ctx->fast_need;
        } else {  // room for the local flow only: the full flow it is
          ctx->compressed_first = false;
        }
      }
    }
    ctx->policy = o.draft_auto ? DraftLengthPolicy::adaptive(64)
                               : DraftLengthPolicy::fixed(o.draft_length);
    if (o.draft_auto && !r.row_costs.empty()) {
      std::vector<RowCostPoint> curve;
      for (const auto& [rows, seconds] : r.row_costs) curve.push_back({rows, seconds});
      try {
        ctx->policy.set_row_costs(std::move(curve));
      } catch (const std::exception& e) {
        throw Error(std::string("field 'row_costs': ") + e.what());
      }
    }
    ctx->stop.max_tokens = size_t(o.max_tokens);
    if (o.stop_at_eos)
      for (int e : m.model->config().eos_token_ids) ctx->stop.eos_ids.push_back(e);
    ctx->stop.stop = o.stop;
    ctx->stop.tokenizer = m.tokenizer.get();
    ctx->result.id = ctx->id;
    ctx->result.prompt_ids = s.prompt;
  } catch (const std::exception& e) {  // refused before it reached the scheduler: counted here
    for (auto* n : {&m.counters->submitted, &m.counters->failed}) n->fetch_add(1, std::memory_order_relaxed);
    ctx->promise.set_value(failed_result(ctx->id, e.what()));
    return sub;
  }
  std::lock_guard<std::mutex> lock(m.send_mu);
  if (m.closing) {
    for (auto* n : {&m.counters->submitted, &m.counters->failed}) n->fetch_add(1, std::memory_order_relaxed);
    ctx->promise.set_value(failed_result(ctx->id, "request: the engine is shutting down"));
    return sub;
  }
  caf::anon_send(m.sched, actors::submit_msg{std::move(ctx)});
  return sub;
}

void Engine::cancel(uint64_t id) {
  std::lock_guard<std::mutex> lock(impl_->send_mu);
  if (!impl_->closing) caf::anon_send(impl_->sched, actors::cancel_msg{id});
}

std::map<std::string, double> Engine::busy_fraction(std::chrono::steady_clock::time_point from,
                                                    std::chrono::steady_clock::time_point to) {
  return impl_->trace->busy_fraction(from, to);
}

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
  s.tp = m.cfg.tp;
  s.remote_fetchers = m.net_fetchers.size();
  s.remote_fetchers_busy_peak = m.counters->fetchers_busy_peak.load(std::memory_order_relaxed);
  for (size_t r = 0; r < m.tiers.size(); ++r) {  // traffic: summed over the ranks
    const TierBytes b = m.tiers[r]->bytes();
    s.full_tier_bytes_read += b.read;
    s.full_tier_bytes_written += b.written;
    s.full_tier_bytes_held += b.held;
    for (const auto& lane : m.streamers)
      s.full_tier_bytes_read_verify += lane->ranks[r]->bytes_streamed();
  }
  s.full_tier_bytes_read_prefill = m.batcher->prefill_bytes_streamed();
  const size_t streamed = s.full_tier_bytes_read_verify + s.full_tier_bytes_read_prefill;
  s.full_tier_bytes_read_refold =
      s.full_tier_bytes_read > streamed ? s.full_tier_bytes_read - streamed : 0;
  s.fast_memory_budget = m.fast[0]->capacity();  // fast memory: per rank, the fullest
  s.device_bytes = m.model->device_bytes();
  for (const auto& f : m.fast) {
    s.fast_memory_used = std::max(s.fast_memory_used, f->used());
    s.fast_memory_peak = std::max(s.fast_memory_peak, f->peak());
  }
  s.fast_memory_reserved = m.counters->fast_reserved.load(std::memory_order_relaxed);
  return s;
}

void Engine::write_trace(const std::string& path) {
  if (!impl_->cfg.trace)
    throw Error("Engine::write_trace(" + path + "): EngineConfig::trace was false, so no trace was recorded");
  impl_->trace->write_chrome_trace(path);
}

std::string Engine::decode(const std::vector<int32_t>& ids) const {
  return impl_->tokenizer->decode(ids, true);
}

}  // namespace vericache
