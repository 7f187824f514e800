// The scratch registry: a fixed table of directory paths, each slot guarded by an
// atomic state so that a signal handler can read it without locks or allocation.
#include "kvtiers/scratch_registry.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstddef>
#include <cstring>
#include <thread>

#include "kernels/error.hpp"

namespace vc {

namespace {

// A slot's state: free, busy (being filled by register, or being removed),
// live (a registered directory), removed (by remove_all_scratch; freed by
// unregister). A removed slot is not reused until its owner unregisters it, so an
// owner never frees another tier's registration.
enum SlotState : int { kFree = 0, kBusy = 1, kLive = 2, kRemoved = 3 };

struct Slot {
  std::atomic<int> state{kFree};
  char path[PATH_MAX] = {};
};
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs lock-free atomics");

std::array<Slot, kMaxScratchDirs> g_slots;

// Unlinks the tier files in `dir` (one pass over its entries); async-signal-safe.
void unlink_tier_files(const char* dir) noexcept {
  const int fd = ::open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  alignas(8) char buf[4096];
  for (;;) {
    const ssize_t n = ::getdents64(fd, buf, sizeof buf);
    if (n <= 0) break;
    for (ssize_t off = 0; off < n;) {
      const auto* e = reinterpret_cast<const dirent64*>(buf + off);
      if (is_scratch_file_name(e->d_name)) ::unlinkat(fd, e->d_name, 0);
      off += e->d_reclen;
    }
  }
  ::close(fd);
}

// Removes the tier files and then `dir`; true if the directory is gone.
bool remove_dir(const char* dir) noexcept {
  // A file created while we list (another thread still running) fails the rmdir:
  // list again a few times.
  for (int pass = 0; pass < 8; ++pass) {
    unlink_tier_files(dir);
    if (::rmdir(dir) == 0 || errno == ENOENT) return true;
    if (errno != ENOTEMPTY && errno != EEXIST) return false;
  }
  return false;
}

}  // namespace

bool is_scratch_file_name(const char* name) noexcept {
  // req-<digits>.kv or req-<digits>.kv.grow
  if (std::strncmp(name, "req-", 4) != 0) return false;
  const char* p = name + 4;
  if (*p < '0' || *p > '9') return false;
  while (*p >= '0' && *p <= '9') ++p;
  return std::strcmp(p, ".kv") == 0 || std::strcmp(p, ".kv.grow") == 0;
}

int register_scratch_dir(const std::string& dir) {
  if (dir.size() >= PATH_MAX)
    throw Error("scratch registry: the directory name is too long (" +
                std::to_string(dir.size()) + " bytes): " + dir);
  for (size_t i = 0; i < g_slots.size(); ++i) {
    Slot& s = g_slots[i];
    int expected = kFree;
    if (!s.state.compare_exchange_strong(expected, kBusy, std::memory_order_acquire)) continue;
    std::memcpy(s.path, dir.c_str(), dir.size() + 1);
    s.state.store(kLive, std::memory_order_release);
    return int(i);
  }
  throw Error("scratch registry: more than " + std::to_string(kMaxScratchDirs) +
              " disk tiers are live in this process; cannot register " + dir);
}

void unregister_scratch_dir(int slot) noexcept {
  if (slot < 0 || size_t(slot) >= g_slots.size()) return;
  Slot& s = g_slots[size_t(slot)];
  for (;;) {
    int st = s.state.load(std::memory_order_acquire);
    if (st == kBusy) {  // a removal in progress on another thread
      std::this_thread::yield();
      continue;
    }
    if (st == kFree) return;
    if (s.state.compare_exchange_strong(st, kFree, std::memory_order_acq_rel)) return;
  }
}

size_t remove_all_scratch() noexcept {
  size_t removed = 0;
  for (Slot& s : g_slots) {
    int expected = kLive;
    if (!s.state.compare_exchange_strong(expected, kBusy, std::memory_order_acq_rel)) continue;
    if (remove_dir(s.path)) ++removed;
    s.state.store(kRemoved, std::memory_order_release);
  }
  return removed;
}

}  // namespace vc
