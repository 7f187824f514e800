// Chunk value header: writing and strict checking (see the header).
#include "kvtiers/remote/chunk_value.hpp"

#include <xxhash.h>

#include <cstring>

namespace vc {

namespace {

struct Header {  // 64 bytes, little-endian on every supported host
  char magic[4];
  uint16_t version;
  uint8_t kind;
  uint8_t dtype;
  uint32_t layers, kv_heads, head_dim, block_tokens, tokens, reserved;
  uint64_t key_lo, key_hi, payload_bytes, checksum;
};
static_assert(sizeof(Header) == kChunkHeaderBytes);

constexpr char kMagic[4] = {'V', 'C', 'K', 'V'};

}  // namespace

size_t full_chunk_payload_bytes(const ChunkLayout& l) {
  return 2 * l.num_layers * l.chunk_tokens * l.kv_heads * l.head_dim * dtype_size(l.dtype);
}

std::string encode_chunk_value(const ChunkLayout& l, const ChunkKey& key, ChunkKind kind,
                               std::span<const std::byte> payload) {
  Header h{};
  std::memcpy(h.magic, kMagic, 4);
  h.version = kChunkFormatVersion;
  h.kind = uint8_t(kind);
  h.dtype = uint8_t(l.dtype);
  h.layers = uint32_t(l.num_layers);
  h.kv_heads = uint32_t(l.kv_heads);
  h.head_dim = uint32_t(l.head_dim);
  h.block_tokens = uint32_t(l.block_tokens);
  h.tokens = uint32_t(l.chunk_tokens);
  h.key_lo = key.lo;
  h.key_hi = key.hi;
  h.payload_bytes = payload.size();
  h.checksum = XXH3_64bits(payload.data(), payload.size());
  std::string out(sizeof(h) + payload.size(), '\0');
  std::memcpy(out.data(), &h, sizeof(h));
  if (!payload.empty()) std::memcpy(out.data() + sizeof(h), payload.data(), payload.size());
  return out;
}

std::span<const std::byte> decode_chunk_value(std::string_view value, const ChunkLayout& l,
                                              const ChunkKey& key, ChunkKind kind,
                                              std::string& why) {
  Header h{};
  if (value.size() < sizeof(h)) {
    why = "value of " + std::to_string(value.size()) + " bytes is shorter than the header";
    return {};
  }
  std::memcpy(&h, value.data(), sizeof(h));
  const auto* payload = reinterpret_cast<const std::byte*>(value.data()) + sizeof(h);
  const size_t n = value.size() - sizeof(h);
  if (std::memcmp(h.magic, kMagic, 4) != 0) why = "not a VeriCache chunk (bad magic)";
  else if (h.version != kChunkFormatVersion)
    why = "format version " + std::to_string(h.version) + ", this build reads " +
          std::to_string(kChunkFormatVersion);
  else if (h.kind != uint8_t(kind)) why = "chunk of another kind";
  else if (h.dtype != uint8_t(l.dtype) || h.layers != l.num_layers || h.kv_heads != l.kv_heads ||
           h.head_dim != l.head_dim || h.block_tokens != l.block_tokens ||
           h.tokens != l.chunk_tokens)
    why = "chunk of another KV layout";
  else if (h.key_lo != key.lo || h.key_hi != key.hi) why = "value stored under another key";
  else if (h.payload_bytes != n)
    why = "payload of " + std::to_string(n) + " bytes, header says " + std::to_string(h.payload_bytes);
  else if (kind == ChunkKind::full && n != full_chunk_payload_bytes(l))
    why = "full chunk payload of " + std::to_string(n) + " bytes, the layout needs " +
          std::to_string(full_chunk_payload_bytes(l));
  else if (XXH3_64bits(payload, n) != h.checksum) why = "checksum mismatch";
  else return {payload, n};
  return {};
}

}  // namespace vc
