#include "kvtiers/host_pinning.hpp"

#include <mutex>
#include <unordered_map>

namespace vc {
namespace {

struct Registry {
  std::mutex mu;
  std::shared_ptr<HostPinner> current;
  std::unordered_map<void*, std::shared_ptr<HostPinner>> offered;  // buffer -> its pinner
};

Registry& registry() {
  static auto* r = new Registry;  // never destroyed: buffers may be freed during exit
  return *r;
}

}  // namespace

std::shared_ptr<HostPinner> install_host_pinner(std::shared_ptr<HostPinner> pinner) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  std::swap(r.current, pinner);
  return pinner;
}

std::shared_ptr<HostPinner> host_pinner() {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  return r.current;
}

void pin_host(void* p, size_t bytes) noexcept {
  if (p == nullptr || bytes == 0) return;
  std::shared_ptr<HostPinner> pinner;
  {
    Registry& r = registry();
    std::lock_guard lock(r.mu);
    if (r.current == nullptr) return;
    try {
      r.offered.emplace(p, r.current);
    } catch (...) {
      return;  // not remembered: left pageable
    }
    pinner = r.current;
  }
  pinner->pin(p, bytes);
}

void unpin_host(void* p) noexcept {
  std::shared_ptr<HostPinner> pinner;
  {
    Registry& r = registry();
    std::lock_guard lock(r.mu);
    const auto it = r.offered.find(p);
    if (it == r.offered.end()) return;
    pinner = std::move(it->second);
    r.offered.erase(it);
  }
  pinner->unpin(p);
}

}  // namespace vc
