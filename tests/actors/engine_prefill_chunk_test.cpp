// EngineConfig::prefill_chunk: the drafter prefills a prompt that many tokens at a
// time. Requests of every kind, sent at once, give the same tokens and logprobs at
// every chunk size (vericache's equal to full decoding); a smaller chunk gives the
// long prompt more slices; a size out of range is an error naming it.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <vericache/engine.hpp>

#include "tests/actors/engine_trace.hpp"
#include "tests/error_naming.hpp"
#include "tests/runtime/test_support.hpp"

namespace {

using vericache::Engine;
using vericache::EngineConfig;
using vericache::Request;

std::vector<int32_t> prompt(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  const auto& c = vc::test::tinycode()->config();
  return vc::test::random_tokens(rng, n, c.vocab_size, c.bos_token_id);
}

Request request(const std::vector<int32_t>& p, const char* mode, const char* compressor, bool sampled) {
  Request r;
  r.prompt_ids = p;
  r.mode = mode;
  r.compressor = compressor;
  r.max_tokens = 24;
  r.ignore_eos = true;
  r.draft = "8";
  r.fold_every = 8;  // views rebuilt while other prompts' prefills are between slices
  if (sampled) {
    r.temperature = 0.8f;
    r.top_k = 40;
    r.seed = 77;
  }
  return r;
}

// Every kind of request the drafter prefills: full, vericache over each family of
// compressor (token dropping with and without prompt statistics, quantization),
// lossy, greedy and sampled.
std::vector<Request> requests() {
  const auto p = prompt(700, 3), q = prompt(530, 4);
  return {request(p, "full", "snapkv", false),      request(p, "vericache", "snapkv", false),
          request(q, "vericache", "h2o", true),     request(p, "vericache", "kvzip", false),
          request(q, "vericache", "kivi", true),    request(p, "lossy", "snapkv", false),
          request(q, "lossy", "h2o", true),         request(q, "full", "snapkv", true)};
}

std::vector<vericache::Result> run(size_t chunk, const std::vector<Request>& rs, bool slice = true) {
  EngineConfig c;
  c.model_dir = VC_MODEL_DIR;
  c.prefill_chunk = chunk;
  c.slice_prefill = slice;
  Engine engine(c);
  std::vector<Engine::Submission> subs;
  for (const auto& r : rs) subs.push_back(engine.submit(r));
  std::vector<vericache::Result> out;
  for (auto& s : subs) out.push_back(s.result.get());
  return out;
}

TEST(engine_prefill_chunk, every_kind_of_request_gives_the_same_tokens_and_logprobs_at_every_chunk_size) {
  const auto rs = requests();
  // The reference prefills each prompt whole, one after another: nothing runs
  // between its chunks or between the layers of its view's building.
  const auto ref = run(256, rs, /*slice=*/false);
  for (size_t i = 0; i < ref.size(); ++i) ASSERT_TRUE(ref[i].ok) << i << ": " << ref[i].error;
  // vericache equals full decoding of the same prompt (requests 0/1 greedy; 7 is
  // the sampled full twin of 2 and 4's prompt).
  EXPECT_EQ(ref[0].output_ids, ref[1].output_ids);
  EXPECT_EQ(ref[0].output_ids, ref[3].output_ids);
  for (size_t chunk : {size_t(256), size_t(64), size_t(7), size_t(1000)}) {
    const auto got = run(chunk, rs);
    for (size_t i = 0; i < rs.size(); ++i) {
      ASSERT_TRUE(got[i].ok) << "chunk " << chunk << ", request " << i << ": " << got[i].error;
      EXPECT_EQ(ref[i].output_ids, got[i].output_ids) << "chunk " << chunk << ", request " << i;
      EXPECT_EQ(ref[i].output_logprobs, got[i].output_logprobs) << "chunk " << chunk << ", request " << i;
      // The views too: what each kept, and how many drafts verification took.
      EXPECT_EQ(ref[i].stats.compressed_bytes, got[i].stats.compressed_bytes) << "chunk " << chunk << ", request " << i;
      EXPECT_EQ(ref[i].stats.accepted, got[i].stats.accepted) << "chunk " << chunk << ", request " << i;
    }
  }
}

// The long prompt's prefill slices, read from the engine's trace.
size_t prefill_slices(size_t chunk, size_t prompt_tokens) {
  EngineConfig c;
  c.model_dir = VC_MODEL_DIR;
  c.prefill_chunk = chunk;
  c.trace = true;
  Engine engine(c);
  auto sub = engine.submit(request(prompt(prompt_tokens, 5), "vericache", "snapkv", false));
  const auto r = sub.result.get();
  EXPECT_TRUE(r.ok) << r.error;
  size_t n = 0;
  const auto trace = vc::test::engine_trace(engine);
  for (const auto& e : trace["traceEvents"]) n += vc::test::slice_of(e, "prefill", sub.id);
  return n;
}

TEST(engine_prefill_chunk, a_smaller_chunk_cuts_a_prompts_prefill_into_more_slices) {
  // A slice ends before each chunk and before each layer of the view's building
  // (SnapKV reads the prompt's KV back a layer at a time); one more runs to the end.
  const size_t layers = size_t(vc::test::tinycode()->config().num_layers);
  EXPECT_EQ(prefill_slices(256, 1000), 4 + layers + 1);
  EXPECT_EQ(prefill_slices(100, 1000), 10 + layers + 1);
}

TEST(engine_prefill_chunk, a_chunk_size_out_of_range_is_an_error_naming_it) {
  for (size_t bad : {size_t(0), size_t(65537)}) {
    EngineConfig c;
    c.model_dir = VC_MODEL_DIR;
    c.prefill_chunk = bad;
    vc::test::expect_error_naming([&] { Engine engine(c); }, "prefill_chunk");
  }
}

}  // namespace
