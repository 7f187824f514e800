// What the remote tier's tests share: a small KV shape and a tier config over a
// loopback store, prompts, full-tier entries of pseudo-random KV, and their bytes.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kvtiers/full_tier.hpp"
#include "kvtiers/remote/remote_tier.hpp"

namespace vc::test {

inline KvCacheConfig small_kv() {
  KvCacheConfig c;
  c.num_layers = 2;
  c.kv_heads = 2;
  c.head_dim = 8;
  c.block_tokens = 4;
  c.num_blocks = 64;
  c.dtype = DType::bf16;
  return c;
}

inline RemoteTierConfig remote_cfg(const std::string& url) {
  RemoteTierConfig r;
  r.url = url;
  r.chunk_tokens = 8;
  // Generous: a loaded CI machine (or a sanitizer build) must not turn a slow reply
  // into a fault; the tests of faults shorten them.
  r.timeouts.connect = std::chrono::milliseconds(3000);
  r.timeouts.io = std::chrono::milliseconds(3000);
  r.fetch_window = 2;
  return r;
}

inline std::vector<int32_t> tokens(size_t n, int32_t base = 7) {
  std::vector<int32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = base + int32_t(i * 31 % 97);
  return t;
}

// Request `id` of `tier` with `n` positions of pseudo-random KV.
inline void fill(FullTier& tier, uint64_t id, size_t n, uint32_t seed = 1) {
  const KvCacheConfig& c = tier.config();
  std::mt19937 rng(seed);
  std::normal_distribution<float> d;
  std::vector<float> k(c.kv_heads * c.head_dim), v(k.size());
  tier.create(id, n);
  for (size_t p = 0; p < n; ++p)
    for (size_t l = 0; l < c.num_layers; ++l) {
      for (float& x : k) x = d(rng);
      for (float& x : v) x = d(rng);
      tier.write(id, l, p, k.data(), v.data());
    }
}

// Layer l's first n positions of request id, as bytes (K then V).
inline std::vector<std::byte> layer_bytes(FullTier& tier, uint64_t id, size_t l, size_t n) {
  std::vector<std::byte> k(tier.staging_bytes(n)), v(k.size());
  tier.read_layer(id, l, n, k.data(), v.data());
  const size_t used = (n / tier.config().block_tokens) * tier.config().block_tokens *
                      tier.config().kv_heads * tier.config().head_dim * 2;
  std::vector<std::byte> out(k.begin(), k.begin() + used);
  out.insert(out.end(), v.begin(), v.begin() + used);
  return out;
}

}  // namespace vc::test
