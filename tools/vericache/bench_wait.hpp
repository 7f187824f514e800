// Waiting for a request's first token in the engine benches without hanging when a
// request never gets one: the engine refused it (a bad field) or it failed. The
// wait watches the requests' results and reports the first that ended first.
#pragma once
#include <chrono>
#include <future>
#include <span>
#include <string>

#include <vericache/engine.hpp>

#include "kernels/error.hpp"

namespace vc::cli {

/// `first`'s value once it is ready; vc::Error naming `what` and the reason when one
/// of `watch` that has had no token (`had_token(i)` false) ends before it (its
/// result's error, or how it finished), or after `limit` with neither. A request
/// that had its token and then finished is no error (`first` may wait on others).
template <class T, class HadToken>
T await_first_token(std::future<T>& first, std::span<vericache::Engine::Submission> watch,
                    const std::string& what, HadToken had_token,
                    std::chrono::steady_clock::duration limit = std::chrono::minutes(30)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    if (first.wait_for(std::chrono::milliseconds(20)) == std::future_status::ready) return first.get();
    for (size_t i = 0; i < watch.size(); ++i) {
      vericache::Engine::Submission& s = watch[i];
      if (s.result.wait_for(std::chrono::seconds(0)) != std::future_status::ready) continue;
      // It may have ended just after its token came: look again before blaming it.
      if (first.wait_for(std::chrono::seconds(0)) == std::future_status::ready) return first.get();
      if (had_token(i)) continue;
      const vericache::Result r = s.result.get();
      throw Error(what + ": a request ended before its first token: " +
                  (r.ok ? "it finished (" + r.finish_reason + ")" : r.error));
    }
    if (std::chrono::steady_clock::now() > deadline)
      throw Error(what + ": no first token after " +
                  std::to_string(std::chrono::duration_cast<std::chrono::minutes>(limit).count()) + " minutes");
  }
}

}  // namespace vc::cli
