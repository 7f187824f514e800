// The disk full tier: one file per request in per-layer regions of fixed capacity
// (layout in full_tier.hpp), in a private mkdtemp directory per tier, one block per
// layer buffered for writes, and reads of a whole layer's K (and V) with one 4 KiB-
// aligned pread each, O_DIRECT when the filesystem allows it.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "kernels/error.hpp"
#include "kvtiers/full_tier.hpp"
#include "kvtiers/scratch_registry.hpp"

namespace vc {

namespace {

constexpr size_t kNoBlock = std::numeric_limits<size_t>::max();
constexpr size_t kDefaultBlocks = 16;           // capacity when create() has no hint
constexpr size_t kCopyChunk = size_t(8) << 20;  // re-layout copies in 8 MiB pieces

size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

std::string errno_text() { return std::strerror(errno); }

// $TMPDIR if set (it must name a directory), else /tmp.
std::string temp_dir() {
  const char* env = std::getenv("TMPDIR");
  if (env == nullptr || *env == '\0') return "/tmp";
  std::error_code ec;
  if (!std::filesystem::is_directory(env, ec))
    throw Error("DiskFullTier: TMPDIR is '" + std::string(env) +
                "', which is not an existing directory; set TMPDIR to one or give the disk "
                "tier a directory (--disk-dir)");
  return env;
}

// Closes a descriptor on scope exit unless released.
struct FdGuard {
  int fd;
  ~FdGuard() {
    if (fd >= 0) ::close(fd);
  }
  int release() { return std::exchange(fd, -1); }
};

// Reads up to n bytes at off, retrying short reads; the count read (less than n at
// end of file), or -1 with errno set.
ssize_t pread_full(int fd, void* buf, size_t n, size_t off) {
  size_t done = 0;
  while (done < n) {
    const ssize_t r = ::pread(fd, static_cast<char*>(buf) + done, n - done, off_t(off + done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    if (r == 0) break;
    done += size_t(r);
  }
  return ssize_t(done);
}

bool pwrite_full(int fd, const void* buf, size_t n, size_t off) {
  size_t done = 0;
  while (done < n) {
    const ssize_t r =
        ::pwrite(fd, static_cast<const char*>(buf) + done, n - done, off_t(off + done));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    done += size_t(r);
  }
  return true;
}

}  // namespace

struct DiskFullTier::DiskSlot : Slot {
  std::string path;
  int fd = -1;  // buffered, read-write: pending-block writes, re-layout
  size_t capacity_blocks = 0;
  size_t region = 0;                  // bytes of one region (a layer's K or V)
  std::vector<std::byte> pending;     // [layers][K, V][block bytes]
  std::vector<size_t> pending_block;  // [layers]: block held in `pending`, or kNoBlock
  std::vector<char> dirty;            // [layers]: pending differs from the file
};

DiskFullTier::DiskFullTier(const KvCacheConfig& cfg, std::string dir, bool direct_io)
    : FullTier(cfg), parent_(std::move(dir)), direct_io_(direct_io) {
  namespace fs = std::filesystem;
  if (parent_.empty()) parent_ = temp_dir();
  while (parent_.size() > 1 && parent_.back() == '/') parent_.pop_back();
  std::error_code ec;
  const fs::file_status st = fs::status(parent_, ec);
  if (!fs::exists(st)) {
    fs::create_directories(parent_, ec);  // kept afterwards: others may share it
    if (ec) throw Error("DiskFullTier: cannot create directory " + parent_ + ": " + ec.message());
  } else if (!fs::is_directory(st)) {
    throw Error("DiskFullTier: " + parent_ + " is not a directory");
  }
  // A private directory per tier: names cannot clash with another tier, another
  // process or the user's files, and creating it checks that `parent_` is writable
  // (access(W_OK) is wrong for root and for read-only mounts).
  std::string tmpl = parent_ + "/vericache-kv-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr)
    throw Error("DiskFullTier: directory " + parent_ +
                " is not writable (cannot create a private directory in it): " + errno_text());
  dir_ = std::move(tmpl);
  try {
    scratch_slot_ = register_scratch_dir(dir_);
  } catch (...) {
    ::rmdir(dir_.c_str());
    throw;
  }
}

DiskFullTier::~DiskFullTier() {
  close_all();            // unlinks every file this tier created
  ::rmdir(dir_.c_str());  // only if empty: never removes anything else
  unregister_scratch_dir(scratch_slot_);
}

std::string DiskFullTier::file_path(uint64_t id) const {
  return dir_ + "/req-" + std::to_string(id) + ".kv";
}

std::string DiskFullTier::where(uint64_t id) const {
  return "disk full tier, request " + std::to_string(id) + " (file " + file_path(id) + ")";
}

size_t DiskFullTier::region_bytes(size_t capacity_blocks) const {
  return round_up(capacity_blocks * block_bytes(), kTierAlign);
}

std::unique_ptr<FullTier::Slot> DiskFullTier::open_slot(uint64_t id, size_t capacity_blocks) {
  auto d = std::make_unique<DiskSlot>();
  d->path = file_path(id);
  d->capacity_blocks = capacity_blocks > 0 ? capacity_blocks : kDefaultBlocks;
  d->region = region_bytes(d->capacity_blocks);
  FdGuard fd{::open(d->path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600)};
  if (fd.fd < 0) throw Error(where(id) + ": cannot create the KV file: " + errno_text());
  if (::ftruncate(fd.fd, off_t(2 * cfg_.num_layers * d->region)) != 0) {
    const std::string why = errno_text();
    ::unlink(d->path.c_str());
    throw Error(where(id) + ": cannot size the KV file: " + why);
  }
  d->fd = fd.release();
  d->pending.assign(2 * cfg_.num_layers * block_bytes(), std::byte{0});
  d->pending_block.assign(cfg_.num_layers, kNoBlock);
  d->dirty.assign(cfg_.num_layers, 0);
  return d;
}

void DiskFullTier::ensure_blocks(uint64_t id, Slot& s, size_t n_blocks) {
  auto& d = static_cast<DiskSlot&>(s);
  if (n_blocks > d.capacity_blocks) relayout(id, d, std::max(n_blocks, 2 * d.capacity_blocks));
}

void DiskFullTier::relayout(uint64_t id, DiskSlot& d, size_t capacity_blocks) {
  const std::string tmp = d.path + ".grow";
  const size_t region = region_bytes(capacity_blocks);
  FdGuard nfd{::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600)};
  auto fail = [&](const std::string& what) {
    if (nfd.fd >= 0) ::unlink(tmp.c_str());  // only the file we created
    throw Error(where(id) + ": growing to " + std::to_string(capacity_blocks) + " blocks: " + what);
  };
  if (nfd.fd < 0) fail("cannot create " + tmp + ": " + errno_text());
  if (::ftruncate(nfd.fd, off_t(2 * cfg_.num_layers * region)) != 0)
    fail("cannot size " + tmp + ": " + errno_text());
  std::vector<std::byte> buf(std::min(kCopyChunk, d.region));
  for (size_t r = 0; r < 2 * cfg_.num_layers; ++r) {
    const size_t used = blocks_for(std::max(d.layer_length[r / 2], d.ahead_end)) * block_bytes();
    for (size_t off = 0; off < used; off += buf.size()) {
      const size_t n = std::min(buf.size(), used - off);
      const ssize_t got = pread_full(d.fd, buf.data(), n, r * d.region + off);
      if (got < 0) fail("cannot read the KV file: " + errno_text());
      if (size_t(got) < n) fail("the KV file " + d.path + " is truncated");
      if (!pwrite_full(nfd.fd, buf.data(), n, r * region + off))
        fail("cannot write " + tmp + ": " + errno_text());
      io_read_ += n;
      io_written_ += n;
    }
  }
  if (::rename(tmp.c_str(), d.path.c_str()) != 0)
    fail("cannot rename " + tmp + " to " + d.path + ": " + errno_text());
  ::close(d.fd);
  d.fd = nfd.release();
  d.capacity_blocks = capacity_blocks;
  d.region = region;
}

void DiskFullTier::flush(uint64_t id, DiskSlot& d, size_t layer) {
  if (!d.dirty[layer]) return;
  const size_t bb = block_bytes(), off = d.pending_block[layer] * bb;
  const std::byte* k = d.pending.data() + 2 * layer * bb;
  if (!pwrite_full(d.fd, k, bb, 2 * layer * d.region + off) ||
      !pwrite_full(d.fd, k + bb, bb, (2 * layer + 1) * d.region + off))
    throw Error(where(id) + ": cannot write the KV file: " + errno_text());
  io_written_ += 2 * bb;
  d.dirty[layer] = 0;
}

FullTier::BlockRef DiskFullTier::block_for_write(uint64_t id, Slot& s, size_t layer, size_t block) {
  auto& d = static_cast<DiskSlot&>(s);
  const size_t bb = block_bytes();
  std::byte* k = d.pending.data() + 2 * layer * bb;
  if (d.pending_block[layer] != block) {
    flush(id, d, layer);
    d.pending_block[layer] = kNoBlock;
    if (block_written(d, layer, block)) {
      const size_t off = block * bb;
      const ssize_t a = pread_full(d.fd, k, bb, 2 * layer * d.region + off);
      const ssize_t b =
          a == ssize_t(bb) ? pread_full(d.fd, k + bb, bb, (2 * layer + 1) * d.region + off) : a;
      if (a < 0 || b < 0) throw Error(where(id) + ": cannot read the KV file: " + errno_text());
      if (size_t(a) < bb || size_t(b) < bb)
        throw Error(where(id) + ": the KV file " + d.path + " is truncated (layer " +
                    std::to_string(layer) + ", block " + std::to_string(block) + ")");
      io_read_ += 2 * bb;
    } else {
      std::memset(k, 0, 2 * bb);
    }
    d.pending_block[layer] = block;
  }
  d.dirty[layer] = 1;
  return {k, k + bb};
}

int DiskFullTier::open_for_read(uint64_t id, int write_fd, bool aligned, bool& direct) {
  const std::string path = file_path(id);
  direct = false;
  // No symlink followed, and no wait on a FIFO put at the name: the tier's lock is
  // held here, and every request would wait with it.
  constexpr int kFlags = O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK;
  int fd = -1;
  if (direct_io_ && aligned) {
    fd = ::open(path.c_str(), kFlags | O_DIRECT);
    struct stat st {};
    if (fd >= 0) direct = true;
    else if (errno == EINVAL && ::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode))
      direct_io_ = false;  // the filesystem refuses O_DIRECT (a FIFO at the name does too)
  }
  if (fd < 0) fd = ::open(path.c_str(), kFlags);
  if (fd < 0) {
    if (errno == ENOENT)
      throw Error(where(id) + ": the KV file " + path + " is missing (deleted behind the tier)");
    if (errno == ELOOP)
      throw Error(where(id) + ": the KV file " + path + " was replaced by a symbolic link behind the tier");
    throw Error(where(id) + ": cannot open the KV file " + path + ": " + errno_text());
  }
  // Reads go by name (O_DIRECT needs its own descriptor), writes by the descriptor
  // the tier created: the name must still be that file, or the reads would see
  // another file's bytes as this request's KV.
  struct stat named {}, written {};
  if (::fstat(fd, &named) != 0 || ::fstat(write_fd, &written) != 0) {
    const std::string why = errno_text();
    ::close(fd);
    throw Error(where(id) + ": cannot stat the KV file: " + why);
  }
  if (!S_ISREG(named.st_mode) || named.st_dev != written.st_dev || named.st_ino != written.st_ino) {
    ::close(fd);
    throw Error(where(id) + ": the KV file " + path + " was replaced behind the tier" +
                (S_ISREG(named.st_mode) ? "" : " (by something other than a regular file)"));
  }
  (void)::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);  // only the open was not to wait
  return fd;
}

void DiskFullTier::read_blocks(uint64_t id, Slot& s, size_t layer, size_t first_block,
                               size_t n_blocks, std::byte* k, std::byte* v) {
  auto& d = static_cast<DiskSlot&>(s);
  const size_t bb = block_bytes();
  const size_t start = first_block * bb;  // within the layer's K (or V) region
  // O_DIRECT needs page-aligned buffers, offsets and sizes: whole layers and chunks
  // of a multiple of 4 KiB always are; anything else is read buffered, exactly.
  const bool aligned = reinterpret_cast<uintptr_t>(k) % kTierAlign == 0 &&
                       reinterpret_cast<uintptr_t>(v) % kTierAlign == 0 &&
                       start % kTierAlign == 0;
  const size_t bytes = aligned ? round_up(n_blocks * bb, kTierAlign) : n_blocks * bb;
  const size_t k_off = 2 * layer * d.region + start, v_off = (2 * layer + 1) * d.region + start;
  for (;;) {
    bool direct = false;
    FdGuard fd{open_for_read(id, d.fd, aligned, direct)};
    struct stat st {};
    if (::fstat(fd.fd, &st) != 0)
      throw Error(where(id) + ": cannot stat the KV file: " + errno_text());
    auto truncated = [&](size_t have) {
      return Error(where(id) + ": the KV file " + d.path + " is truncated: it has " +
                   std::to_string(have) + " bytes, layer " + std::to_string(layer) + " needs " +
                   std::to_string(v_off + bytes));
    };
    if (size_t(st.st_size) < v_off + bytes) throw truncated(size_t(st.st_size));
    const ssize_t a = pread_full(fd.fd, k, bytes, k_off);
    const ssize_t b = a == ssize_t(bytes) ? pread_full(fd.fd, v, bytes, v_off) : a;
    if ((a < 0 || b < 0) && errno == EINVAL && direct) {
      direct_io_ = false;  // O_DIRECT opened but refused this read: buffered from now on
      continue;
    }
    if (a < 0 || b < 0) throw Error(where(id) + ": cannot read the KV file: " + errno_text());
    if (size_t(a) < bytes || size_t(b) < bytes) throw truncated(size_t(st.st_size));
    break;
  }
  io_read_ += 2 * bytes;
  // The layer's buffered block is newer than the file.
  const size_t pb = d.pending_block[layer];
  if (pb != kNoBlock && pb >= first_block && pb < first_block + n_blocks) {
    std::memcpy(k + (pb - first_block) * bb, d.pending.data() + 2 * layer * bb, bb);
    std::memcpy(v + (pb - first_block) * bb, d.pending.data() + (2 * layer + 1) * bb, bb);
  }
}

void DiskFullTier::close_slot(uint64_t id, Slot& s) {
  auto& d = static_cast<DiskSlot&>(s);
  // Only the file the tier created goes: one put at its name behind it is left.
  struct stat named {}, written {};
  const bool ours = d.fd < 0 || ::fstat(d.fd, &written) != 0 || ::lstat(d.path.c_str(), &named) != 0 ||
                    (named.st_dev == written.st_dev && named.st_ino == written.st_ino);
  if (d.fd >= 0) ::close(d.fd);
  d.fd = -1;
  ::unlink((d.path + ".grow").c_str());
  if (!ours) return;
  if (::unlink(d.path.c_str()) != 0 && errno != ENOENT)
    throw Error(where(id) + ": cannot delete the KV file: " + errno_text());
}

}  // namespace vc
