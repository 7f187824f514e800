// Process-wide list of the live scratch directories of disk full tiers, so that an
// interrupted process can delete its KV files before it exits. Registration is
// done by DiskFullTier; remove_all_scratch() is async-signal-safe, for signal
// handlers (the vericache CLI installs one for SIGINT, SIGTERM and SIGHUP; a program
// embedding the engine may call it from its own handler before it exits).
//
// Invariants: a registered directory was made by this process (mkdtemp) and holds
// only the tier's files `req-<id>.kv` and `req-<id>.kv.grow`; removal deletes those
// names and then the directory (rmdir: never anything else, never recursively).
#pragma once
#include <cstddef>
#include <string>

namespace vc {

/// At most this many scratch directories are registered at once.
inline constexpr size_t kMaxScratchDirs = 256;

/// Registers `dir` (an absolute or relative path shorter than PATH_MAX); returns the
/// slot to pass to unregister_scratch_dir. Throws vc::Error when the table is full or
/// the path is too long.
[[nodiscard]] int register_scratch_dir(const std::string& dir);
/// Forgets slot `slot` (the directory itself is left as it is). Waits for a removal
/// in progress on another thread to finish.
void unregister_scratch_dir(int slot) noexcept;

/// Deletes the tier files and then each registered directory, and forgets them.
/// Async-signal-safe: uses only open, getdents64, unlinkat, rmdir and close, and no
/// locks or allocation. Returns how many directories were removed.
size_t remove_all_scratch() noexcept;

/// Whether `name` (a file name, no directory) is one a disk tier creates.
[[nodiscard]] bool is_scratch_file_name(const char* name) noexcept;

}  // namespace vc
