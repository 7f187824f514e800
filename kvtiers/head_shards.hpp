// A rank's view of the other ranks' KV heads under tensor parallelism, for the
// parts of compression that look across heads.
#pragma once
#include <cstddef>
#include <span>
#include <vector>

namespace vc {

/// With tensor parallelism a rank holds some of each layer's KV heads (or a replica
/// of one, when there are fewer KV heads than ranks). Methods that rank tokens
/// across heads (Compressor::select_globally) and the quantizers' storage plan must
/// see every head, so that the plan does not depend on the degree: the passes
/// gather the values they need through this. Every rank calls gather() at the same
/// point of its compression with its own heads' values.
class HeadShards {
 public:
  virtual ~HeadShards() = default;
  /// KV heads of the unsharded model.
  [[nodiscard]] virtual size_t global_kv_heads() const = 0;
  /// This rank's first KV head in the unsharded model.
  [[nodiscard]] virtual size_t first_kv_head() const = 0;
  /// `local`: [this rank's KV heads][per_head]. Returns [global_kv_heads][per_head]:
  /// every distinct head once, in head order (replicas are taken once).
  [[nodiscard]] virtual std::vector<float> gather(std::span<const float> local,
                                                  size_t per_head) = 0;
};

}  // namespace vc
