// Keys of prefix-KV chunks in the remote store. A prompt is cut into chunks of a
// fixed number of tokens; chunk i's key is a chained 128-bit xxHash (XXH3) of
// everything that decides its KV bits: the model fingerprint, how the KV was computed
// (the CPU's SIMD path, the device and its kernels: Model::numerics()), the KV layout
// and dtype, the tensor-parallel rank and degree, the previous chunk's key and the
// chunk's tokens. Equal keys therefore mean equal KV (up to a 2^-128 collision), and
// a chunk can only be found when its whole prefix matches. The full form and each
// compressed form (compressor + parameters) live under distinct keys.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kernels/dtype.hpp"

namespace vc {

/// What a chunk's KV depends on besides its tokens.
struct ChunkLayout {
  uint64_t model_fingerprint = 0;  // runtime/model_fingerprint
  uint64_t numerics = 0;           // a hash of Model::numerics() (RemoteTierConfig::numerics)
  size_t num_layers = 0, kv_heads = 0, head_dim = 0, block_tokens = 0;
  DType dtype = DType::bf16;
  size_t tp_rank = 0, tp_degree = 1;
  size_t chunk_tokens = 256;  // a multiple of block_tokens
};

/// A 128-bit chunk key.
struct ChunkKey {
  uint64_t lo = 0, hi = 0;
  friend bool operator==(const ChunkKey&, const ChunkKey&) = default;
  /// 32 hex digits.
  [[nodiscard]] std::string hex() const;
};

/// The keys of every complete chunk of `tokens` ([tokens.size() / chunk_tokens]),
/// each chained on the one before (the first on the layout).
[[nodiscard]] std::vector<ChunkKey> chunk_keys(const ChunkLayout& layout,
                                               std::span<const int32_t> tokens);

/// Prefix every key of this project carries in the store (`cache clear` deletes
/// only these).
inline constexpr const char* kRemoteKeyPrefix = "vc:kv:";

/// Store key of a chunk's full KV: "vc:kv:full:<hex>".
[[nodiscard]] std::string full_chunk_key(const ChunkKey& k);
/// Store key of a chunk's compressed KV by `compressor_spec` (name, parameters,
/// ratio): "vc:kv:cmp:<hex of spec>:<hex>".
[[nodiscard]] std::string compressed_chunk_key(const ChunkKey& k, const std::string& compressor_spec);
/// The key a compressed chunk's value header carries: `k` chained with
/// `compressor_spec`, so a value of another compressor or parameters is rejected
/// like a value stored under another key.
[[nodiscard]] ChunkKey compressed_chunk_id(const ChunkKey& k, const std::string& compressor_spec);

}  // namespace vc
