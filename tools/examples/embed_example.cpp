// Embedding VeriCache: the smallest program that uses the engine through its one
// public header. Three requests run at once; their tokens stream to stdout as they
// arrive (decoded one by one); the third is cancelled midway. Then each result and
// the engine's figures are printed.
//
//   vericache_embed_example [MODEL_DIR]
#include <vericache/engine.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <iostream>
#include <mutex>
#include <string>
#include <vector>

#ifndef VC_DEFAULT_MODEL_DIR
#define VC_DEFAULT_MODEL_DIR "models/tinycode"
#endif

namespace {

// Makes control characters visible so each streamed piece stays on one line.
std::string escaped(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '"') out += "\\\"";
    else out += c;
  }
  return out;
}

std::vector<vericache::Request> make_requests() {
  std::vector<vericache::Request> reqs(3);
  // 1: greedy, drafted over a SnapKV-compressed cache and verified (exact).
  reqs[0].prompt = "<|begin_of_text|>def fibonacci(n):";
  reqs[0].max_tokens = 40;
  reqs[0].mode = "vericache";
  reqs[0].compressor = "snapkv";
  reqs[0].ratio = 4;
  reqs[0].draft = "8";
  // 2: sampled, KIVI-quantized drafts, draft length chosen per round.
  reqs[1].prompt = "<|begin_of_text|>class Stack:\n    def push(self, item):";
  reqs[1].max_tokens = 40;
  reqs[1].mode = "vericache";
  reqs[1].compressor = "kivi";
  reqs[1].ratio = 8;
  reqs[1].draft = "auto";
  reqs[1].temperature = 0.8f;
  reqs[1].top_k = 40;
  reqs[1].seed = 7;
  // 3: long full-KV decode that main() cancels after a few tokens.
  reqs[2].prompt = "<|begin_of_text|>import os\n";
  reqs[2].max_tokens = 4000;
  reqs[2].mode = "full";
  reqs[2].ignore_eos = true;
  return reqs;
}

}  // namespace

int main(int argc, char** argv) {
  // Declared before the engine: its callbacks use them until it is destroyed.
  std::mutex mu;  // guards stdout and the counter below
  std::condition_variable cv;
  size_t third_tokens = 0;
  try {
    vericache::EngineConfig cfg;
    cfg.model_dir = argc > 1 ? argv[1] : VC_DEFAULT_MODEL_DIR;
    cfg.max_active = 4;
    vericache::Engine engine(cfg);
    std::cout << "engine ready (model " << cfg.model_dir << ")\n";

    const std::vector<vericache::Request> reqs = make_requests();
    const size_t cancel_after = 12;  // tokens of request 3 before it is cancelled

    std::vector<vericache::Engine::Submission> subs;
    for (size_t i = 0; i < reqs.size(); ++i) {
      // Runs on an engine thread: decode the token, print it, count request 3's.
      auto on_token = [&engine, &mu, &cv, &third_tokens, i](uint64_t id, int32_t token) {
        const std::string piece = engine.decode({token});
        std::lock_guard<std::mutex> lock(mu);
        std::cout << "  [" << i + 1 << " id " << id << "] \"" << escaped(piece) << "\"\n";
        if (i == 2 && ++third_tokens == cancel_after) cv.notify_all();
      };
      subs.push_back(engine.submit(reqs[i], on_token));
    }
    std::cout << "submitted " << subs.size() << " requests\n";

    // Cancel request 3 once it has streamed a few tokens (or gave up waiting).
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait_for(lock, std::chrono::seconds(60), [&] { return third_tokens >= cancel_after; });
      std::cout << "cancelling request 3 (id " << subs[2].id << ") after " << third_tokens
                << " tokens\n";
    }
    engine.cancel(subs[2].id);

    std::vector<vericache::Result> results;
    for (auto& s : subs) results.push_back(s.result.get());
    for (size_t i = 0; i < results.size(); ++i) {
      std::lock_guard<std::mutex> lock(mu);  // a late callback may still print
      const vericache::Result& r = results[i];
      const vericache::RequestStats& st = r.stats;
      std::cout << "result " << i + 1 << " (id " << r.id << ", " << reqs[i].mode
                << "): " << (r.ok ? "ok" : "failed") << ", finish_reason " << r.finish_reason
                << ", " << r.output_ids.size() << " tokens";
      if (st.rounds > 0)
        std::cout << ", " << st.rounds << " rounds, " << st.accepted << "/" << st.drafted
                  << " drafts accepted";
      std::cout << ", " << st.total_seconds << " s\n";
      if (!r.error.empty()) std::cout << "  error: " << r.error << "\n";
      std::cout << "  text: \"" << escaped(r.text) << "\"\n";
    }

    const vericache::EngineStats es = engine.stats();
    std::cout << "engine: " << es.submitted << " submitted, " << es.completed << " completed, "
              << es.cancelled << " cancelled, " << es.failed << " failed, " << es.tokens
              << " tokens in " << es.seconds << " s\n";
    for (const auto& [name, f] : es.busy_fraction)
      std::cout << "  " << name << " busy " << 100.0 * f << "%\n";
    std::cout << "  full tier: " << es.full_tier_bytes_read << " bytes read, "
              << es.full_tier_bytes_written << " bytes written\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
