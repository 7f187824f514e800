// The bytes stored under a chunk key: a fixed 64-byte header, then the payload.
//
//   header: magic "VCKV", format version, kind (full / compressed), dtype, layers,
//           kv_heads, head_dim, block_tokens, tokens, the chunk key itself, payload
//           length and an XXH3-64 checksum of the payload (little-endian)
//   full payload: for each layer, K then V of the chunk's blocks, raw, in the full
//           tier's block layout [blocks, kv_heads, block_tokens, head_dim]
//   compressed payload: the chunk's positions of a request's compressed view
//           (CompressedView::slice, then serialize); the header's key is then
//           compressed_chunk_id(chunk key, compressor spec)
//
// decode_chunk_value() accepts a value only when every header field matches what
// the reader expects (so a value of another format version, layout or key, a
// truncated value or a flipped payload bit is rejected, with the reason).
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "kvtiers/remote/chunk_key.hpp"

namespace vc {

/// The value format this build writes and reads; any other is treated as a miss.
inline constexpr uint16_t kChunkFormatVersion = 1;
inline constexpr size_t kChunkHeaderBytes = 64;

enum class ChunkKind : uint8_t { full = 1, compressed = 2 };

/// Header + payload of one chunk.
[[nodiscard]] std::string encode_chunk_value(const ChunkLayout& layout, const ChunkKey& key,
                                             ChunkKind kind, std::span<const std::byte> payload);

/// The payload of `value` when it is a valid `kind` chunk of `key` in `layout`;
/// otherwise an empty span and `why` says what was wrong.
[[nodiscard]] std::span<const std::byte> decode_chunk_value(std::string_view value,
                                                            const ChunkLayout& layout,
                                                            const ChunkKey& key, ChunkKind kind,
                                                            std::string& why);

/// Payload bytes of one full chunk in `layout`.
[[nodiscard]] size_t full_chunk_payload_bytes(const ChunkLayout& layout);

}  // namespace vc
