// The CUDA attention backend's copies of compressed views (attend_views): one per
// (view, layer) on the device, every KV head's kept rows in one buffer copied up on
// the view's first draft pass -- plain rows as stored, packed sides with the drafter
// kernel's descriptors -- and dropped once the view is gone or changed
// (CompressedView::id / lifetime).
#pragma once
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/attention_mixed.cuh"
#include "kernels/error.hpp"
#include "kvtiers/compressed_tier.hpp"
#include "runtime/cuda/device_buffer.hpp"
#include "runtime/cuda/packed_side_staging.hpp"
#include "runtime/view_rows_plan.hpp"

namespace vc::cuda_backend {

/// A view's kept rows of one layer on the device, every KV head's in one buffer
/// copied up once: plain rows as stored, or a packed side's arrays with the
/// kernel's descriptors (their rope_table set per pass).
struct ViewLayerCopy {
  struct Head {
    const void* k = nullptr;
    const void* v = nullptr;
    cuda::QuantPrefixSide qk, qv;  // packed heads; positions set when a side is RoPE'd
  };
  uint64_t view_id = 0;
  std::weak_ptr<const void> alive;
  std::mutex mu;
  bool ready = false;
  DeviceBuffer storage;
  std::vector<Head> heads;
  std::atomic<size_t> bytes{0};  // storage's once ready, for device_bytes() without `mu`
};

class ViewCopies {
 public:
  /// The device copy of plan.prefixes[first]'s view at the plan's layer, made from
  /// the plan's prefixes of that view (every KV head: consecutive from `first`) on
  /// its first use, through `st` (host staging) and `stream`. A view without an id
  /// (moved from) gets a copy of its own. `dev` names the device in errors.
  std::shared_ptr<ViewLayerCopy> get(const std::string& dev, std::vector<std::byte>& st,
                                     cudaStream_t stream, const ViewRowsPlan& plan, size_t first,
                                     size_t row_bytes) {
    const CompressedView& view = *plan.prefixes[first].view;
    std::shared_ptr<ViewLayerCopy> copy;
    {
      // Copies of views that are gone are freed once `mu_` is let go (cudaFree waits
      // for the whole device): `dropped` is destroyed after `lock`.
      std::vector<std::shared_ptr<ViewLayerCopy>> dropped;
      std::lock_guard lock(mu_);
      for (auto it = copies_.begin(); it != copies_.end();) {
        if (!it->second->alive.expired()) {
          ++it;
          continue;
        }
        dropped.push_back(std::move(it->second));
        it = copies_.erase(it);
      }
      const auto key = std::pair{view.id(), plan.layer};
      if (const auto it = copies_.find(key); view.id() != 0 && it != copies_.end()) {
        copy = it->second;
      } else {
        copy = std::make_shared<ViewLayerCopy>();
        copy->view_id = view.id();
        copy->alive = view.lifetime();
        if (view.id() != 0) copies_.emplace(key, copy);
      }
    }
    std::lock_guard hold(copy->mu);
    if (copy->ready) return copy;
    std::vector<size_t> of_head(view.kv_heads(), plan.prefixes.size());
    for (size_t i = first; i < plan.prefixes.size() && plan.prefixes[i].view == &view; ++i)
      of_head.at(plan.prefixes[i].head) = i;
    st.clear();
    struct At {
      size_t k = 0, v = 0, pos = 0;
      StagedSide sk, sv;
    };
    std::vector<At> at(view.kv_heads());
    for (size_t g = 0; g < view.kv_heads(); ++g) {
      if (of_head[g] == plan.prefixes.size())
        throw Error("device " + dev + ": a plan lists only some KV heads of a view");
      const ViewRowsPlan::Prefix& p = plan.prefixes[of_head[g]];
      if (p.packed()) {
        at[g].sk = stage_side(st, *p.k_side), at[g].sv = stage_side(st, *p.v_side);
        at[g].pos = put(st, p.positions, p.rows * sizeof(int32_t));
      } else if (p.rows > 0) {
        at[g].k = put(st, p.k, p.rows * row_bytes), at[g].v = put(st, p.v, p.rows * row_bytes);
      }
    }
    cudaError_t e = copy->storage.reserve(std::max<size_t>(1, st.size()));
    if (e == cudaSuccess)
      e = cudaMemcpyAsync(copy->storage.get(), st.data(), st.size(), cudaMemcpyHostToDevice, stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(stream);  // other streams read it next
    if (e != cudaSuccess) throw Error("device " + dev + ": copying a view's kept rows: " + cuda_error(e));
    const auto* base = static_cast<const std::byte*>(copy->storage.get());
    copy->heads.assign(view.kv_heads(), {});
    for (size_t g = 0; g < view.kv_heads(); ++g) {
      const ViewRowsPlan::Prefix& p = plan.prefixes[of_head[g]];
      ViewLayerCopy::Head& h = copy->heads[g];
      if (p.packed()) {
        const auto* pos = reinterpret_cast<const int32_t*>(base + at[g].pos);
        h.qk = describe(at[g].sk, p.rows, base, pos, nullptr);
        h.qv = describe(at[g].sv, p.rows, base, pos, nullptr);
      } else if (p.rows > 0) {
        h.k = base + at[g].k, h.v = base + at[g].v;
      }
    }
    copy->ready = true;
    copy->bytes = copy->storage.bytes();
    return copy;
  }

  /// Bytes of the copies held (ready ones).
  [[nodiscard]] size_t bytes() const {
    std::lock_guard lock(mu_);
    size_t n = 0;
    for (const auto& [key, c] : copies_) n += c->bytes.load();
    return n;
  }

 private:
  mutable std::mutex mu_;
  std::map<std::pair<uint64_t, size_t>, std::shared_ptr<ViewLayerCopy>> copies_;  // (view id, layer)
};

}  // namespace vc::cuda_backend
