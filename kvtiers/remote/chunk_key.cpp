// Chained XXH3-128 chunk keys (see the header).
#include "kvtiers/remote/chunk_key.hpp"

#include <xxhash.h>

#include <cstdio>

#include "kernels/error.hpp"

namespace vc {

namespace {

XXH128_hash_t layout_hash(const ChunkLayout& l) {
  const uint64_t fields[] = {0x76635f6b765f3032ull,  // "vc_kv_02": the key scheme's version
                             l.model_fingerprint, l.numerics, l.num_layers, l.kv_heads, l.head_dim,
                             l.block_tokens,      uint64_t(l.dtype), l.tp_rank, l.tp_degree,
                             l.chunk_tokens};
  return XXH3_128bits(fields, sizeof(fields));
}

}  // namespace

std::string ChunkKey::hex() const {
  char buf[33];
  std::snprintf(buf, sizeof(buf), "%016llx%016llx", static_cast<unsigned long long>(hi),
                static_cast<unsigned long long>(lo));
  return buf;
}

std::vector<ChunkKey> chunk_keys(const ChunkLayout& layout, std::span<const int32_t> tokens) {
  if (layout.chunk_tokens == 0 || layout.block_tokens == 0 ||
      layout.chunk_tokens % layout.block_tokens != 0)
    throw Error("remote chunk keys: chunk_tokens (" + std::to_string(layout.chunk_tokens) +
                ") must be a positive multiple of block_tokens (" +
                std::to_string(layout.block_tokens) + ")");
  std::vector<ChunkKey> keys;
  XXH128_hash_t prev = layout_hash(layout);
  for (size_t b = 0; b + layout.chunk_tokens <= tokens.size(); b += layout.chunk_tokens) {
    XXH3_state_t* st = XXH3_createState();
    XXH3_128bits_reset(st);
    XXH3_128bits_update(st, &prev, sizeof(prev));
    XXH3_128bits_update(st, tokens.data() + b, layout.chunk_tokens * sizeof(int32_t));
    prev = XXH3_128bits_digest(st);
    XXH3_freeState(st);
    keys.push_back(ChunkKey{prev.low64, prev.high64});
  }
  return keys;
}

std::string full_chunk_key(const ChunkKey& k) { return std::string(kRemoteKeyPrefix) + "full:" + k.hex(); }

std::string compressed_chunk_key(const ChunkKey& k, const std::string& compressor_spec) {
  char spec[17];
  std::snprintf(spec, sizeof(spec), "%016llx",
                static_cast<unsigned long long>(XXH3_64bits(compressor_spec.data(), compressor_spec.size())));
  return std::string(kRemoteKeyPrefix) + "cmp:" + spec + ":" + k.hex();
}

ChunkKey compressed_chunk_id(const ChunkKey& k, const std::string& compressor_spec) {
  XXH3_state_t* st = XXH3_createState();
  XXH3_128bits_reset(st);
  XXH3_128bits_update(st, &k, sizeof(k));
  XXH3_128bits_update(st, compressor_spec.data(), compressor_spec.size());
  const XXH128_hash_t h = XXH3_128bits_digest(st);
  XXH3_freeState(st);
  return ChunkKey{h.low64, h.high64};
}

}  // namespace vc
