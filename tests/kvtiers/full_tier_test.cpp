// Full tier (host and disk): bit-exact round trip against PagedKvCache and the
// attention kernel over the staging buffer, truncation, release, byte accounting,
// and the disk tier's files (growth, missing and truncated files, bad directories).
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/attention.hpp"
#include "kernels/error.hpp"
#include "kvtiers/full_tier.hpp"

namespace vc {
namespace {

namespace fs = std::filesystem;

// A fresh directory under /tmp, removed with everything in it.
struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/vc-full-tier-XXXXXX";
    const char* p = mkdtemp(tmpl);
    if (p == nullptr) throw std::runtime_error("mkdtemp failed");
    path = p;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

KvCacheConfig config(DType t) {
  KvCacheConfig c;
  c.num_layers = 3;
  c.kv_heads = 2;
  c.head_dim = 16;
  c.block_tokens = 4;
  c.num_blocks = 64;
  c.dtype = t;
  return c;
}

std::unique_ptr<FullTier> make_tier(bool disk, const KvCacheConfig& c, const std::string& dir) {
  if (disk) return std::make_unique<DiskFullTier>(c, dir + "/kv");
  return std::make_unique<HostFullTier>(c, /*chunk_blocks=*/3);
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no vc::Error)";
}

// Random rows written to a PagedKvCache and a tier alike.
struct Writer {
  std::mt19937 rng{1234};
  std::normal_distribution<float> dist{0.0f, 1.0f};
  std::vector<float> k, v;
  explicit Writer(const KvCacheConfig& c) : k(c.kv_heads * c.head_dim), v(k.size()) {}
  void roll() {
    for (float& x : k) x = dist(rng);
    for (float& x : v) x = dist(rng);
  }
};

// Layer `l` of `seq` in `cache`, first n positions, vs the staged blocks: bit-equal.
void expect_same_bytes(const PagedKvCache& cache, const KvSequence& seq, size_t l, size_t n,
                       KvStaging& st) {
  const KvCacheConfig& c = cache.config();
  const size_t row = c.head_dim * dtype_size(c.dtype);
  const cpu::PagedKv a = cache.view(l, seq), b = st.view();
  for (size_t p = 0; p < n; ++p) {
    const size_t j = p / c.block_tokens, t = p % c.block_tokens;
    for (size_t h = 0; h < c.kv_heads; ++h) {
      const size_t oa = ((size_t(seq.blocks[j]) * c.kv_heads + h) * c.block_tokens + t) * row;
      const size_t ob = ((j * c.kv_heads + h) * c.block_tokens + t) * row;
      ASSERT_EQ(
          std::memcmp(static_cast<const char*>(a.k) + oa, static_cast<const char*>(b.k) + ob, row),
          0)
          << "K layer " << l << " pos " << p << " head " << h;
      ASSERT_EQ(
          std::memcmp(static_cast<const char*>(a.v) + oa, static_cast<const char*>(b.v) + ob, row),
          0)
          << "V layer " << l << " pos " << p << " head " << h;
    }
  }
}

// attention_row over the cache and over the staging buffer: the same bits.
void expect_same_attention(const PagedKvCache& cache, const KvSequence& seq, size_t l, size_t n,
                           const KvStaging& st, std::mt19937& rng) {
  const KvCacheConfig& c = cache.config();
  const size_t n_heads = 2 * c.kv_heads;
  std::normal_distribution<float> dist;
  std::vector<float> q(n_heads * c.head_dim), o1(q.size()), o2(q.size());
  for (float& x : q) x = dist(rng);
  cpu::attention_row(q.data(), n_heads, cache.view(l, seq), n, 0.25f, o1.data());
  cpu::attention_row(q.data(), n_heads, st.view(), n, 0.25f, o2.data());
  ASSERT_EQ(std::memcmp(o1.data(), o2.data(), o1.size() * sizeof(float)), 0) << "layer " << l;
}

TEST(full_tier, host_and_disk_tiers_read_back_the_paged_cache_bits_and_attention_matches_exactly) {
  for (bool disk : {false, true}) {
    for (DType t : {DType::bf16, DType::f32}) {
      SCOPED_TRACE(std::string(disk ? "disk " : "host ") + std::string(dtype_name(t)));
      TempDir dir;
      const KvCacheConfig c = config(t);
      PagedKvCache cache(c);
      auto tier = make_tier(disk, c, dir.path);
      Writer w(c);
      const uint64_t ids[] = {3, 7, 11};
      const size_t lens[] = {13, 6, 21};  // last block partly full
      std::vector<KvSequence> seqs(3);
      for (size_t r = 0; r < 3; ++r) {
        tier->create(ids[r], r == 2 ? 5 : 0);  // request 11 outgrows its capacity hint
        cache.reserve(seqs[r], lens[r]);
      }
      // Request 3: decode order; request 7: bulk copy; request 11: layer by layer.
      for (size_t p = 0; p < lens[0]; ++p)
        for (size_t l = 0; l < c.num_layers; ++l) {
          w.roll();
          cache.write(l, seqs[0], p, w.k.data(), w.v.data());
          tier->write(ids[0], l, p, w.k.data(), w.v.data());
        }
      for (size_t p = 0; p < lens[1]; ++p)
        for (size_t l = 0; l < c.num_layers; ++l) {
          w.roll();
          cache.write(l, seqs[1], p, w.k.data(), w.v.data());
        }
      tier->copy_from(ids[1], cache, seqs[1], 0, 4);
      tier->copy_from(ids[1], cache, seqs[1], 4, 2);
      for (size_t l = 0; l < c.num_layers; ++l)
        for (size_t p = 0; p < lens[2]; ++p) {
          w.roll();
          cache.write(l, seqs[2], p, w.k.data(), w.v.data());
          tier->write(ids[2], l, p, w.k.data(), w.v.data());
        }
      KvStaging st(c);
      for (size_t r = 0; r < 3; ++r) {
        EXPECT_EQ(tier->length(ids[r]), lens[r]);
        for (size_t l = 0; l < c.num_layers; ++l)
          for (size_t n : {lens[r], lens[r] - 1}) {
            tier->read_layer(ids[r], l, n, st);
            expect_same_bytes(cache, seqs[r], l, n, st);
            expect_same_attention(cache, seqs[r], l, n, st, w.rng);
          }
      }
      // Unaligned caller buffers (the disk tier's buffered path) give the same bytes.
      std::vector<char> k(tier->staging_bytes(13) + 1), v(k.size());
      tier->read_layer(3, 1, 13, k.data() + 1, v.data() + 1);
      tier->read_layer(3, 1, 13, st);
      const size_t four_blocks = 4 * c.block_tokens * c.kv_heads * c.head_dim * dtype_size(t);
      EXPECT_EQ(std::memcmp(k.data() + 1, st.k(), four_blocks), 0);
      EXPECT_EQ(std::memcmp(v.data() + 1, st.v(), four_blocks), 0);
    }
  }
}

TEST(full_tier, truncation_rolls_back_and_release_forgets_the_request) {
  for (bool disk : {false, true}) {
    SCOPED_TRACE(disk ? "disk" : "host");
    TempDir dir;
    const KvCacheConfig c = config(DType::bf16);
    PagedKvCache cache(c);
    auto tier = make_tier(disk, c, dir.path);
    Writer w(c);
    KvSequence seq;
    cache.reserve(seq, 12);
    tier->create(5);
    for (size_t p = 0; p < 10; ++p)
      for (size_t l = 0; l < c.num_layers; ++l) {
        w.roll();
        cache.write(l, seq, p, w.k.data(), w.v.data());
        tier->write(5, l, p, w.k.data(), w.v.data());
      }
    tier->truncate(5, 6);
    cache.truncate(seq, 6);
    EXPECT_EQ(tier->length(5), 6u);
    KvStaging st(c);
    EXPECT_NE(message_of([&] { tier->read_layer(5, 0, 7, st); }).find("read past the end"),
              std::string::npos);
    EXPECT_NE(message_of([&] {
                w.roll();
                tier->write(5, 0, 8, w.k.data(), w.v.data());
              }).find("leaves a gap"),
              std::string::npos);
    // Positions 6.. are written again with new values.
    cache.reserve(seq, 11);
    for (size_t p = 6; p < 11; ++p)
      for (size_t l = 0; l < c.num_layers; ++l) {
        w.roll();
        cache.write(l, seq, p, w.k.data(), w.v.data());
        tier->write(5, l, p, w.k.data(), w.v.data());
      }
    for (size_t l = 0; l < c.num_layers; ++l) {
      tier->read_layer(5, l, 11, st);
      expect_same_bytes(cache, seq, l, 11, st);
    }
    tier->truncate(5, 20);  // longer: no-op
    EXPECT_EQ(tier->length(5), 11u);
    tier->release(5);
    EXPECT_FALSE(tier->contains(5));
    EXPECT_NE(message_of([&] { (void)tier->length(5); }).find("unknown request 5"),
              std::string::npos);
    EXPECT_NE(message_of([&] { tier->release(5); }).find("unknown request 5"), std::string::npos);
    if (disk) {
      EXPECT_FALSE(fs::exists(static_cast<DiskFullTier&>(*tier).file_path(5)));
    }
    tier->create(5);  // the id can be used again
    EXPECT_EQ(tier->length(5), 0u);
  }
}

TEST(full_tier, byte_accounting_counts_held_read_and_written_positions_exactly) {
  for (bool disk : {false, true}) {
    SCOPED_TRACE(disk ? "disk" : "host");
    TempDir dir;
    const KvCacheConfig c = config(DType::bf16);
    auto tier = make_tier(disk, c, dir.path);
    const size_t row = 2 * 16 * 2;  // one layer, K or V: kv_heads * head_dim * 2 bytes
    EXPECT_EQ(tier->bytes_per_token(), 2 * 3 * row);
    Writer w(c);
    tier->create(1);
    tier->create(2);
    for (size_t p = 0; p < 10; ++p)
      for (size_t l = 0; l < 3; ++l) tier->write(1, l, p, w.k.data(), w.v.data());
    for (size_t p = 0; p < 5; ++p) tier->write(2, 0, p, w.k.data(), w.v.data());
    EXPECT_EQ(tier->bytes_written_total(), (30 + 5) * 2 * row);
    EXPECT_EQ(tier->bytes_held(1), 10 * 6 * row);
    EXPECT_EQ(tier->bytes_held(2), 5 * 6 * row);  // length is the longest layer
    EXPECT_EQ(tier->bytes_held_total(), 15 * 6 * row);
    KvStaging st(c);
    tier->read_layer(1, 2, 7, st);
    tier->read_layer(2, 0, 5, st);
    EXPECT_EQ(tier->bytes_read_total(), (7 + 5) * 2 * row);
    tier->truncate(1, 4);
    EXPECT_EQ(tier->bytes_held_total(), 9 * 6 * row);
    tier->release(2);
    EXPECT_EQ(tier->bytes(), (TierBytes{4 * 6 * row, 12 * 2 * row, 35 * 2 * row}));
    EXPECT_NE(format_tier_bytes("full", tier->bytes()).find("held 1.50 KiB"), std::string::npos);
  }
}

TEST(full_tier, disk_tier_grows_its_file_keeps_aligned_regions_and_cleans_up) {
  TempDir dir;
  const KvCacheConfig c = config(DType::bf16);
  PagedKvCache cache(c);
  const std::string kv_dir = dir.path + "/tier";
  {
    DiskFullTier tier(c, kv_dir);
    EXPECT_TRUE(fs::is_directory(kv_dir));
    Writer w(c);
    KvSequence seq;
    cache.reserve(seq, 150);
    tier.create(9, 8);  // two blocks: re-laid out several times on the way to 38
    for (size_t p = 0; p < 150; ++p)
      for (size_t l = 0; l < c.num_layers; ++l) {
        w.roll();
        cache.write(l, seq, p, w.k.data(), w.v.data());
        tier.write(9, l, p, w.k.data(), w.v.data());
      }
    const std::string file = tier.file_path(9);
    ASSERT_TRUE(fs::exists(file));
    EXPECT_EQ(fs::file_size(file) % kTierAlign, 0u);
    EXPECT_FALSE(fs::exists(file + ".grow"));
    KvStaging st(c);
    const size_t io_before = tier.io_bytes_read();
    for (size_t l = 0; l < c.num_layers; ++l) {
      tier.read_layer(9, l, 150, st);
      expect_same_bytes(cache, seq, l, 150, st);
    }
    // One K and one V read per layer, whole 4 KiB pages: 38 blocks of 256 bytes.
    EXPECT_EQ(tier.io_bytes_read() - io_before, 3 * 2 * tier.staging_bytes(150));
    EXPECT_EQ(tier.staging_bytes(150), 3 * kTierAlign);
    EXPECT_GT(tier.io_bytes_written(), 0u);
    tier.create(10);
  }
  // Files and the private dir deleted; the given directory, created, is kept.
  EXPECT_TRUE(fs::is_directory(kv_dir));
  EXPECT_TRUE(fs::is_empty(kv_dir));
}

TEST(full_tier, a_missing_or_truncated_kv_file_gives_an_error_naming_the_file) {
  TempDir dir;
  const KvCacheConfig c = config(DType::f32);
  DiskFullTier tier(c, dir.path);
  Writer w(c);
  KvStaging st(c);
  for (uint64_t id : {1, 2}) {
    tier.create(id);
    for (size_t p = 0; p < 9; ++p)
      for (size_t l = 0; l < c.num_layers; ++l) tier.write(id, l, p, w.k.data(), w.v.data());
  }
  const std::string missing = tier.file_path(1), cut = tier.file_path(2);
  ASSERT_TRUE(fs::remove(missing));
  std::string msg = message_of([&] { tier.read_layer(1, 0, 9, st); });
  EXPECT_NE(msg.find(missing), std::string::npos) << msg;
  EXPECT_NE(msg.find("missing"), std::string::npos) << msg;
  ASSERT_EQ(::truncate(cut.c_str(), 100), 0);
  msg = message_of([&] { tier.read_layer(2, 1, 9, st); });
  EXPECT_NE(msg.find(cut), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  tier.release(1);  // releasing a request whose file is already gone is fine
  EXPECT_FALSE(tier.contains(1));
}

TEST(full_tier, a_kv_file_replaced_behind_the_tier_is_an_error_never_its_bytes) {
  // A same-size file, a symbolic link or a FIFO put at a request's file name: reads
  // went by name and returned the other file's bytes as KV (wrong tokens), or
  // blocked in open() on the FIFO, holding the tier's lock.
  TempDir dir;
  const KvCacheConfig c = config(DType::f32);
  DiskFullTier tier(c, dir.path);
  Writer w(c);
  KvStaging st(c);
  for (uint64_t id : {1, 2, 3, 4}) {
    tier.create(id);
    for (size_t p = 0; p < 9; ++p)
      for (size_t l = 0; l < c.num_layers; ++l) tier.write(id, l, p, w.k.data(), w.v.data());
  }
  tier.read_layer(1, 0, 9, st);  // what was written is read back
  const std::string swapped = tier.file_path(1), linked = tier.file_path(2), fifo = tier.file_path(3);
  const auto size = fs::file_size(swapped);
  const std::string other = dir.path + "/other.kv";
  std::ofstream(other).close();
  fs::resize_file(other, size);
  fs::rename(other, swapped);
  std::string msg = message_of([&] { tier.read_layer(1, 0, 9, st); });
  EXPECT_NE(msg.find("the KV file " + swapped + " was replaced behind the tier"), std::string::npos) << msg;
  fs::copy_file(tier.file_path(4), dir.path + "/copy.kv");
  fs::remove(linked);
  fs::create_symlink(dir.path + "/copy.kv", linked);
  msg = message_of([&] { tier.read_layer(2, 0, 9, st); });
  EXPECT_NE(msg.find(linked + " was replaced by a symbolic link"), std::string::npos) << msg;
  fs::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  msg = message_of([&] { tier.read_layer(3, 0, 9, st); });  // must not block
  EXPECT_NE(msg.find(fifo + " was replaced behind the tier (by something other than a regular file)"),
            std::string::npos)
      << msg;
  tier.read_layer(4, 0, 9, st);  // the others are untouched
  for (uint64_t id : {1, 2, 3}) tier.release(id);
  EXPECT_TRUE(fs::exists(swapped)) << "a file put at the name is not the tier's to delete";
  EXPECT_TRUE(fs::is_symlink(linked));
}

TEST(full_tier, a_directory_that_cannot_be_created_or_written_is_refused_clearly) {
  TempDir dir;
  const KvCacheConfig c = config(DType::bf16);
  const std::string file = dir.path + "/plain-file";
  std::ofstream(file) << "x";
  std::string msg = message_of([&] { DiskFullTier t(c, file + "/kv"); });
  EXPECT_NE(msg.find(file + "/kv"), std::string::npos) << msg;
  msg = message_of([&] { DiskFullTier t(c, file); });
  EXPECT_NE(msg.find("not a directory"), std::string::npos) << msg;
  msg = message_of([&] { DiskFullTier t(c, "/proc"); });  // not writable, even for root
  EXPECT_NE(msg.find("/proc is not writable"), std::string::npos) << msg;
  if (::geteuid() != 0) {
    const std::string ro = dir.path + "/read-only";
    fs::create_directory(ro);
    fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec);
    msg = message_of([&] { DiskFullTier t(c, ro); });
    EXPECT_NE(msg.find(ro + " is not writable"), std::string::npos) << msg;
    fs::permissions(ro, fs::perms::owner_all);
  }
}

TEST(full_tier, unknown_requests_bad_layers_and_duplicate_creates_are_errors) {
  HostFullTier tier(config(DType::bf16));
  std::vector<float> row(32);
  EXPECT_NE(message_of([&] {
              tier.write(4, 0, 0, row.data(), row.data());
            }).find("write: unknown request 4"),
            std::string::npos);
  tier.create(4);
  EXPECT_NE(message_of([&] { tier.create(4); }).find("already exists"), std::string::npos);
  EXPECT_NE(
      message_of([&] { tier.write(4, 3, 0, row.data(), row.data()); }).find("layer 3 out of range"),
      std::string::npos);
  PagedKvCache other(config(DType::f32));
  KvSequence seq;
  EXPECT_NE(message_of([&] { tier.copy_from(4, other, seq, 0, 0); }).find("shape"),
            std::string::npos);
}

}  // namespace
}  // namespace vc
