// Shared by the SchedulerCore remote tests (full and compressed-first flows): a
// request with the remote store configured, and the net_fetcher's reply for a hit.
#pragma once
#include "tests/actors/scheduler_core_fixture.hpp"

namespace vc::actors {
namespace {

constexpr size_t kChunk = 16;

Submitted remote_request(uint64_t id, size_t prompt, size_t max_tokens, DecodeMode mode,
                         size_t limit) {
  Submitted s = make_request(id, prompt, max_tokens, 4, mode);
  s.ctx->remote = true;
  s.ctx->remote_limit = limit;
  return s;
}

[[maybe_unused]] RemoteFetch hit(size_t chunks) {
  RemoteFetch f;
  f.chunks = chunks;
  f.positions = chunks * kChunk;
  f.bytes_full = chunks * 1000;
  return f;
}

}  // namespace
}  // namespace vc::actors
