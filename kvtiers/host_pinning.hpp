// Host memory the tiers hand to a GPU's copy engine -- the host full tier's own
// chunks (whose blocks verify and prefill passes borrow in place, FullTier::
// lend_blocks) and the staging buffers other chunks are read into (KvStaging: the
// disk tier's reads, runs the host tier cannot lend) -- can be pinned in place, so
// that its copies to the device are DMA at the link's rate instead of going through
// the driver's bounce buffers. (The paged cache's storage is not offered: it is
// committed lazily, page by page, and pinning would commit all of it.) A device
// backend installs a pinner (the CUDA one registers the range with
// cudaHostRegister); each such buffer is offered to it right after it is allocated
// and taken back right before it is freed. Buffers allocated while no pinner is
// installed stay pageable; taking back one that was never pinned is a no-op.
// Pinning is best effort: a refusal leaves the buffer pageable, never fails the
// allocation.
#pragma once
#include <cstddef>
#include <memory>

namespace vc {

class HostPinner {
 public:
  virtual ~HostPinner() = default;
  /// Pins [p, p + bytes) if it can; must not throw.
  virtual void pin(void* p, size_t bytes) noexcept = 0;
  /// Unpins what pin(p, ...) pinned, if it did; must not throw.
  virtual void unpin(void* p) noexcept = 0;
};

/// Installs `pinner` for the process (null: none), returning the one it replaces.
std::shared_ptr<HostPinner> install_host_pinner(std::shared_ptr<HostPinner> pinner);
/// The installed pinner, or null.
[[nodiscard]] std::shared_ptr<HostPinner> host_pinner();

/// What the tiers call around a buffer's life. Each remembers which pinner took the
/// buffer, so that a buffer is taken back by the pinner that pinned it even after
/// another was installed.
void pin_host(void* p, size_t bytes) noexcept;
void unpin_host(void* p) noexcept;

}  // namespace vc
