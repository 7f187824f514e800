// The disk tier's private directory: two tiers sharing a directory (same request
// ids) keep to their own files, foreign files are never touched, everything the
// tier made is gone after destruction, an error or remove_all_scratch(), and a
// missing TMPDIR is named.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/error.hpp"
#include "kvtiers/full_tier.hpp"
#include "kvtiers/scratch_registry.hpp"

namespace vc {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/vc-disk-private-XXXXXX";
    const char* p = mkdtemp(tmpl);
    if (p == nullptr) throw std::runtime_error("mkdtemp failed");
    path = p;
  }
  ~TempDir() {
    std::error_code ec;
    fs::permissions(path, fs::perms::owner_all, ec);
    fs::remove_all(path, ec);
  }
};

KvCacheConfig config() {
  KvCacheConfig c;
  c.num_layers = 2;
  c.kv_heads = 2;
  c.head_dim = 16;
  c.block_tokens = 4;
  c.num_blocks = 64;
  c.dtype = DType::f32;
  return c;
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no vc::Error)";
}

// Names and contents of the plain files directly in `dir`, and its subdirectories.
std::map<std::string, std::string> listing(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    std::string body = "<dir>";
    if (e.is_regular_file()) {
      std::ifstream in(e.path(), std::ios::binary);
      std::ostringstream ss;
      ss << in.rdbuf();
      body = ss.str();
    }
    out[e.path().filename().string()] = body;
  }
  return out;
}

// Writes `n` positions of every layer of `id`, each row filled with `value + pos`.
void fill(FullTier& t, uint64_t id, size_t n, float value) {
  const KvCacheConfig& c = t.config();
  std::vector<float> k(c.kv_heads * c.head_dim), v(k.size());
  for (size_t p = 0; p < n; ++p) {
    std::fill(k.begin(), k.end(), value + float(p));
    std::fill(v.begin(), v.end(), -value - float(p));
    for (size_t l = 0; l < c.num_layers; ++l) t.write(id, l, p, k.data(), v.data());
  }
}

// The first K value of position `pos` of layer 0, read back through the tier.
float first_k(FullTier& t, uint64_t id, size_t n, size_t pos) {
  KvStaging st(t.config());
  t.read_layer(id, 0, n, st);
  const KvCacheConfig& c = t.config();
  const size_t block = pos / c.block_tokens, slot = pos % c.block_tokens;
  const auto* k = static_cast<const float*>(st.k());
  return k[(block * c.kv_heads * c.block_tokens + slot) * c.head_dim];
}

TEST(disk_tier, two_tiers_sharing_a_directory_with_the_same_request_ids_keep_their_own_kv) {
  TempDir dir;
  DiskFullTier a(config(), dir.path), b(config(), dir.path);
  EXPECT_NE(a.dir(), b.dir());
  EXPECT_EQ(fs::path(a.dir()).parent_path(), fs::path(dir.path));
  EXPECT_EQ(fs::path(a.dir()).filename().string().rfind("vericache-kv-", 0), 0u);
  EXPECT_NE(a.file_path(1), b.file_path(1));
  // Interleaved: both create request 1 (b's create must not truncate a's file) and
  // grow it past its capacity hint (re-layout renames stay in each private dir).
  a.create(1, 2);
  fill(a, 1, 5, 100.0f);
  b.create(1, 2);
  fill(b, 1, 30, 200.0f);
  fill(a, 1, 40, 100.0f);
  EXPECT_EQ(first_k(a, 1, 40, 3), 103.0f);
  EXPECT_EQ(first_k(a, 1, 40, 39), 139.0f);
  EXPECT_EQ(first_k(b, 1, 30, 3), 203.0f);
  EXPECT_EQ(first_k(b, 1, 30, 29), 229.0f);
  a.release(1);
  EXPECT_TRUE(fs::exists(b.file_path(1)));
  EXPECT_EQ(first_k(b, 1, 30, 17), 217.0f);
}

TEST(disk_tier, foreign_files_in_the_directory_are_never_opened_replaced_or_deleted) {
  TempDir dir;
  std::ofstream(dir.path + "/req-1.kv") << "the user's own req-1.kv";
  std::ofstream(dir.path + "/req-1.kv.grow") << "another of the user's files";
  std::ofstream(dir.path + "/notes.txt") << "notes";
  fs::create_directory(dir.path + "/vericache-kv-mine");
  const auto before = listing(dir.path);
  {
    DiskFullTier t(config(), dir.path);
    t.create(1, 1);
    fill(t, 1, 20, 1.0f);  // grows: re-laid out through req-1.kv.grow in its own dir
    t.create(2);
    fill(t, 2, 3, 2.0f);
    t.release(1);
    EXPECT_EQ(listing(dir.path).size(), before.size() + 1);  // + the private dir
  }
  EXPECT_EQ(listing(dir.path), before);
}

TEST(disk_tier, the_private_dir_and_its_files_are_removed_and_the_given_directory_kept) {
  TempDir dir;
  const std::string given = dir.path + "/made/for/the/tier";
  std::string private_dir, file;
  {
    DiskFullTier t(config(), given);
    private_dir = t.dir();
    EXPECT_EQ(t.parent_dir(), given);
    EXPECT_TRUE(fs::is_directory(private_dir));
    EXPECT_EQ(fs::status(private_dir).permissions() & fs::perms::all, fs::perms::owner_all);
    t.create(7);
    fill(t, 7, 9, 3.0f);
    file = t.file_path(7);
    EXPECT_TRUE(fs::exists(file));
  }  // request 7 still held: destruction deletes it
  EXPECT_FALSE(fs::exists(file));
  EXPECT_FALSE(fs::exists(private_dir));
  EXPECT_TRUE(fs::is_directory(given));
  EXPECT_TRUE(fs::is_empty(given));
}

TEST(disk_tier, a_directory_that_cannot_be_written_leaves_nothing_behind) {
  TempDir dir;
  if (::geteuid() == 0) GTEST_SKIP() << "root writes into read-only directories";
  const std::string ro = dir.path + "/read-only";
  fs::create_directory(ro);
  std::ofstream(ro + "/req-1.kv") << "kept";
  fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec);
  const std::string msg = message_of([&] { DiskFullTier t(config(), ro); });
  EXPECT_NE(msg.find(ro + " is not writable"), std::string::npos) << msg;
  fs::permissions(ro, fs::perms::owner_all);
  EXPECT_EQ(listing(ro), (std::map<std::string, std::string>{{"req-1.kv", "kept"}}));
}

TEST(disk_tier, without_a_directory_it_uses_tmpdir_and_names_a_missing_tmpdir) {
  TempDir dir;
  const char* old = std::getenv("TMPDIR");
  const std::optional<std::string> saved = old ? std::optional<std::string>(old) : std::nullopt;
  ::setenv("TMPDIR", dir.path.c_str(), 1);
  {
    DiskFullTier t(config(), "");
    EXPECT_EQ(fs::path(t.dir()).parent_path(), fs::path(dir.path));
  }
  EXPECT_TRUE(fs::is_empty(dir.path));
  const std::string missing = dir.path + "/no-such-dir";
  ::setenv("TMPDIR", missing.c_str(), 1);
  const std::string msg = message_of([&] { DiskFullTier t(config(), ""); });
  if (saved) ::setenv("TMPDIR", saved->c_str(), 1);
  else ::unsetenv("TMPDIR");
  EXPECT_NE(msg.find("TMPDIR"), std::string::npos) << msg;
  EXPECT_NE(msg.find(missing), std::string::npos) << msg;
  EXPECT_EQ(msg.find("temp_directory_path"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(missing));
}

TEST(scratch_registry, remove_all_scratch_deletes_tier_files_and_private_dirs_only) {
  TempDir dir;
  std::ofstream(dir.path + "/req-1.kv") << "foreign";
  DiskFullTier a(config(), dir.path), b(config(), dir.path);
  a.create(1);
  fill(a, 1, 6, 1.0f);
  b.create(1);
  fill(b, 1, 6, 2.0f);
  // Something that is not the tier's in b's private dir: b's dir must stay.
  std::ofstream(b.dir() + "/keep.txt") << "not a tier file";
  EXPECT_GE(remove_all_scratch(), 1u);
  EXPECT_FALSE(fs::exists(a.dir()));
  EXPECT_FALSE(fs::exists(b.file_path(1)));
  EXPECT_TRUE(fs::exists(b.dir() + "/keep.txt"));
  EXPECT_EQ(listing(dir.path).at("req-1.kv"), "foreign");
  // The tier reports the loss clearly; releasing and destroying are still fine.
  const std::string msg = message_of([&] { a.create(2); });
  EXPECT_NE(msg.find(a.file_path(2)), std::string::npos) << msg;
  a.release(1);
  fs::remove(b.dir() + "/keep.txt");
}

TEST(scratch_registry, knows_the_names_a_disk_tier_creates) {
  EXPECT_TRUE(is_scratch_file_name("req-1.kv"));
  EXPECT_TRUE(is_scratch_file_name("req-18446744073709551615.kv.grow"));
  EXPECT_FALSE(is_scratch_file_name("req-.kv"));
  EXPECT_FALSE(is_scratch_file_name("req-1.kvx"));
  EXPECT_FALSE(is_scratch_file_name("req-1.kv.grow.bak"));
  EXPECT_FALSE(is_scratch_file_name("notes.txt"));
  EXPECT_FALSE(is_scratch_file_name("."));
}

}  // namespace
}  // namespace vc
