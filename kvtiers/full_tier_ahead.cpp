// A run of blocks written ahead of a request's prefill (FullTier::write_blocks_ahead):
// the chunks a back fetch brings from the last one down, put straight into the
// entry above the front, then joined to it where the two meet.
#include <cstring>
#include <string>

#include "kernels/error.hpp"
#include "kvtiers/full_tier.hpp"

namespace vc {

void FullTier::write_blocks_ahead(uint64_t id, size_t first_block, size_t n_blocks,
                                  std::span<const std::byte* const> k, std::span<const std::byte* const> v) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Slot& s = slot(id, "write_blocks_ahead");
  if (k.size() != cfg_.num_layers || v.size() != cfg_.num_layers)
    throw Error(where(id) + ": write_blocks_ahead: " + std::to_string(k.size()) + " K and " +
                std::to_string(v.size()) + " V layers given, the tier has " + std::to_string(cfg_.num_layers));
  if (n_blocks == 0) return;
  const size_t bt = cfg_.block_tokens, begin = first_block * bt, end = (first_block + n_blocks) * bt;
  for (size_t l = 0; l < cfg_.num_layers; ++l)
    if (s.layer_length[l] > begin)
      throw Error(where(id) + ": write_blocks_ahead at position " + std::to_string(begin) + ": layer " +
                  std::to_string(l) + " already holds " + std::to_string(s.layer_length[l]) + " positions");
  const bool run = s.ahead_end > s.ahead_begin;
  if (run && end != s.ahead_begin)
    throw Error(where(id) + ": write_blocks_ahead of positions [" + std::to_string(begin) + ", " +
                std::to_string(end) + ") does not end where the run written ahead begins (" +
                std::to_string(s.ahead_begin) + ")");
  const size_t top = run ? s.ahead_end : end;
  check_capacity(id, s, top);
  ensure_blocks(id, s, blocks_for(top));
  for (size_t l = 0; l < cfg_.num_layers; ++l)
    for (size_t j = 0; j < n_blocks; ++j) {
      const BlockRef r = block_for_write(id, s, l, first_block + j);
      std::memcpy(r.k, k[l] + j * block_bytes(), block_bytes());
      std::memcpy(r.v, v[l] + j * block_bytes(), block_bytes());
    }
  s.ahead_begin = begin;
  s.ahead_end = top;
  written_ += (end - begin) * bytes_per_token();
}

std::pair<size_t, size_t> FullTier::ahead(uint64_t id) const {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  const Slot& s = slot(id, "ahead");
  return {s.ahead_begin, s.ahead_end};
}

void FullTier::join_ahead(uint64_t id, size_t end) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Slot& s = slot(id, "join_ahead");
  if (s.ahead_end <= s.ahead_begin) throw Error(where(id) + ": join_ahead: no run was written ahead");
  if (end > s.ahead_end)
    throw Error(where(id) + ": join_ahead to position " + std::to_string(end) + ": the run written ahead ends at " +
                std::to_string(s.ahead_end));
  for (size_t l = 0; l < cfg_.num_layers; ++l)
    if (s.layer_length[l] < s.ahead_begin)
      throw Error(where(id) + ": join_ahead: layer " + std::to_string(l) + " holds " +
                  std::to_string(s.layer_length[l]) + " positions, short of the run written ahead from " +
                  std::to_string(s.ahead_begin));
  for (size_t& ll : s.layer_length) ll = std::max(ll, end);
  s.length = std::max(s.length, end);
  s.ahead_begin = s.ahead_end = 0;  // its storage past `end` stays the request's (within its size)
}

void FullTier::drop_ahead(uint64_t id) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Slot& s = slot(id, "drop_ahead");
  s.ahead_begin = s.ahead_end = 0;  // its storage stays the request's, rewritten as it grows
}

}  // namespace vc
