// Safetensors reader: reads a file into memory (or maps it), validates its JSON
// header, and gathers the tensors of one file or of the shards listed by an index.
#include "runtime/model/safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>

#include <nlohmann/json.hpp>

#include "kernels/error.hpp"
#include "runtime/model/bounded_input.hpp"

namespace vc {
namespace {

using nlohmann::json;

std::optional<DType> parse_dtype(const std::string& s) {
  if (s == "F32") return DType::f32;
  if (s == "F16") return DType::f16;
  if (s == "BF16") return DType::bf16;
  return std::nullopt;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

/// Closes a file descriptor on scope exit.
struct FdGuard {
  int fd;
  ~FdGuard() {
    if (fd >= 0) ::close(fd);
  }
};

std::atomic<WeightLoad> g_weight_load{WeightLoad::read};

/// Reads the whole file into fresh anonymous memory, 2 MiB-aligned and marked for
/// transparent huge pages, then read-only. Sets `region`/`region_size` to what the
/// destructor unmaps; returns the file's first byte.
///
/// Why not map the file: decode reads every weight once per step, and a thread
/// reading page-cache pages through a file mapping (4 KiB pages) reached 11-14 GB/s
/// where the same bytes in anonymous memory gave 25-30 GB/s (2-core AMD EPYC VM,
/// 2026-12-04; README, "Decode and prefill speed").
///
/// The file is placed so that its data section (after the 8-byte length and the
/// JSON header) starts on a 4 KiB boundary: tensors at offsets that are multiples of
/// 64 then start on cache lines, so a 64-byte vector load of a weight row touches
/// one line, not two. (Headers are any length: in a checkpoint written by the
/// safetensors library every tensor started at byte 56 of a cache line.)
const std::byte* read_into_anonymous_memory(int fd, const std::string& file, size_t size,
                                            void*& region, size_t& region_size) {
  constexpr size_t kHuge = size_t(2) << 20;
  constexpr size_t kDataAlign = 4096;
  size_t shift = 0;  // bytes before the file's first byte; a bad length is parsed later
  uint64_t header_len = 0;
  if (::pread(fd, &header_len, sizeof header_len, 0) == ssize_t(sizeof header_len) &&
      header_len < size) {
    shift = (kDataAlign - (sizeof header_len + header_len) % kDataAlign) % kDataAlign;
  }
  const size_t span = (shift + size + kHuge - 1) / kHuge * kHuge + kHuge;  // room to align
  void* p = ::mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    throw Error(file + ": cannot allocate " + std::to_string(size) +
                " bytes to read the file into: " + std::strerror(errno));
  region = p;  // unmapped by the destructor from here on
  region_size = span;
  auto* aligned = reinterpret_cast<std::byte*>(
      (reinterpret_cast<uintptr_t>(p) + kHuge - 1) / kHuge * kHuge);
  (void)::madvise(aligned, span - size_t(aligned - static_cast<std::byte*>(p)), MADV_HUGEPAGE);
  std::byte* base = aligned + shift;
  size_t done = 0;
  while (done < size) {
    const size_t want = std::min<size_t>(size - done, size_t(64) << 20);
    const ssize_t got = ::pread(fd, base + done, want, off_t(done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw Error(file + ": read failed: " + std::strerror(errno));
    if (got == 0)
      throw Error(file + ": file ended at byte " + std::to_string(done) + " of " +
                  std::to_string(size) + " while it was read (changed on disk?)");
    done += size_t(got);
  }
  if (::mprotect(p, span, PROT_READ) != 0)
    throw Error(file + ": mprotect failed: " + std::strerror(errno));
  return base;
}

/// Parses one header entry into `info` (its data pointer relative to `data`).
void parse_entry(const std::string& file, const std::string& name, const json& e,
                 const std::byte* data, uint64_t data_size, TensorInfo& info,
                 uint64_t& begin, uint64_t& end) {
  const std::string where = file + ": tensor '" + name + "': ";
  if (!e.is_object())
    throw Error(where + "header entry is not an object, found " + std::string(e.type_name()));
  for (const char* field : {"dtype", "shape", "data_offsets"})
    if (!e.contains(field)) throw Error(where + "header entry is missing field '" + field + "'");

  const json& jd = e["dtype"];
  if (!jd.is_string()) throw Error(where + "'dtype' is not a string");
  const auto dt = parse_dtype(jd.get<std::string>());
  if (!dt)
    throw Error(where + "unsupported dtype '" + jd.get<std::string>() +
                "'; supported: F32, F16, BF16");

  const json& js = e["shape"];
  if (!js.is_array()) throw Error(where + "'shape' is not a list");
  uint64_t count = 1;
  bool overflow = false;
  for (const json& d : js) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0)
      throw Error(where + "'shape' holds " + d.dump() + "; expected non-negative integers");
    const uint64_t x = d.get<uint64_t>();
    if (x != 0 && count > std::numeric_limits<uint64_t>::max() / x) overflow = true;
    else count *= x;
    info.shape.push_back(int64_t(x));
  }

  const json& jo = e["data_offsets"];
  if (!jo.is_array() || jo.size() != 2 || !jo[0].is_number_integer() ||
      !jo[1].is_number_integer() || jo[0].get<int64_t>() < 0 || jo[1].get<int64_t>() < 0)
    throw Error(where + "'data_offsets' is " + jo.dump() +
                "; expected [begin, end] with non-negative integers");
  begin = jo[0].get<uint64_t>();
  end = jo[1].get<uint64_t>();
  if (begin > end || end > data_size)
    throw Error(where + "data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                "] out of range of the data section (" + std::to_string(data_size) + " bytes)");

  const uint64_t elem = dtype_size(*dt);
  const uint64_t nbytes = end - begin;
  if (overflow || count > std::numeric_limits<uint64_t>::max() / elem || count * elem != nbytes)
    throw Error(where + "data_offsets span " + std::to_string(nbytes) + " bytes but shape " +
                shape_string(info.shape) + " of " + jd.get<std::string>() + " needs " +
                (overflow ? std::string("more than 2^64") : std::to_string(count * elem)));

  info.name = name;
  info.dtype = *dt;
  info.data = data + begin;
  info.nbytes = size_t(nbytes);
  info.file = file;
}

}  // namespace

void set_weight_load(WeightLoad how) { g_weight_load = how; }
WeightLoad weight_load() { return g_weight_load; }

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const std::filesystem::path& path) {
  const std::string file = path.string();
  FdGuard fd{::open(file.c_str(), O_RDONLY | O_CLOEXEC)};
  if (fd.fd < 0) throw Error(file + ": cannot open safetensors file: " + std::strerror(errno));
  struct stat st{};
  if (::fstat(fd.fd, &st) != 0)
    throw Error(file + ": cannot stat safetensors file: " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw Error(file + ": not a regular file");
  const uint64_t size = uint64_t(st.st_size);
  if (size < 8)
    throw Error(file + ": truncated safetensors file: " + std::to_string(size) +
                " bytes, shorter than the 8-byte header length");

  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  const std::byte* bytes = nullptr;
  if (weight_load() == WeightLoad::map) {
    void* map = ::mmap(nullptr, size_t(size), PROT_READ, MAP_PRIVATE, fd.fd, 0);
    if (map == MAP_FAILED) throw Error(file + ": mmap failed: " + std::strerror(errno));
    f->map_ = map;  // unmapped by the destructor from here on
    f->map_size_ = size_t(size);
    bytes = static_cast<const std::byte*>(map);
  } else {
    bytes = read_into_anonymous_memory(fd.fd, file, size_t(size), f->map_, f->map_size_);
  }

  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | uint64_t(bytes[i]);
  if (header_len > size - 8)
    throw Error(file + ": truncated safetensors file: header length " +
                std::to_string(header_len) + " needs " + std::to_string(header_len) +
                " bytes after the first 8, but the file is " + std::to_string(size) + " bytes");

  const std::string_view header_text(reinterpret_cast<const char*>(bytes + 8), header_len);
  if (json_nesting_depth(header_text, 64) > 64)
    throw Error(file + ": safetensors header is nested deeper than 64 levels");
  json header;
  try {
    header = json::parse(header_text);
  } catch (const json::exception& e) {
    throw Error(file + ": safetensors header is not valid JSON: " + e.what());
  }
  if (!header.is_object())
    throw Error(file + ": safetensors header is not a JSON object (found " +
                std::string(header.type_name()) + ")");

  const std::byte* data = bytes + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;
  struct Span {
    uint64_t begin, end;
    const std::string* name;
  };
  std::vector<Span> spans;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    TensorInfo info;
    uint64_t begin = 0, end = 0;
    parse_entry(file, name, entry, data, data_size, info, begin, end);
    auto [it, inserted] = f->tensors_.emplace(name, std::move(info));
    if (begin != end) spans.push_back({begin, end, &it->first});
  }
  std::sort(spans.begin(), spans.end(),
            [](const Span& a, const Span& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < spans.size(); ++i) {
    if (spans[i].begin < spans[i - 1].end)
      throw Error(file + ": tensors '" + *spans[i - 1].name + "' [" +
                  std::to_string(spans[i - 1].begin) + ", " + std::to_string(spans[i - 1].end) +
                  ") and '" + *spans[i].name + "' [" + std::to_string(spans[i].begin) + ", " +
                  std::to_string(spans[i].end) + ") overlap in the data section");
  }
  return f;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(map_, map_size_);
}

Checkpoint Checkpoint::open(const std::filesystem::path& model_dir) {
  namespace fs = std::filesystem;
  Checkpoint ck;
  ck.dir_ = model_dir;
  std::error_code ec;
  if (!fs::is_directory(model_dir, ec))
    throw Error(model_dir.string() + ": model directory does not exist or is not a directory");

  const fs::path index_path = model_dir / "model.safetensors.index.json";
  const fs::path single_path = model_dir / "model.safetensors";
  if (fs::exists(index_path, ec)) {
    const std::string idx = index_path.string();
    const json j = parse_json_bounded(read_file_bounded(index_path, kMaxModelJsonBytes, idx), idx);
    if (!j.is_object() || !j.contains("weight_map"))
      throw Error(idx + ": field 'weight_map': missing; expected an object {tensor: shard file}");
    if (!j["weight_map"].is_object())
      throw Error(idx + ": field 'weight_map': expected an object {tensor: shard file}, found " +
                  std::string(j["weight_map"].type_name()));
    std::map<std::string, std::shared_ptr<SafetensorsFile>> shards;
    for (const auto& [name, shard] : j["weight_map"].items()) {
      if (!shard.is_string())
        throw Error(idx + ": field 'weight_map." + name + "': expected a shard file name, found " +
                    shard.dump());
      const std::string shard_name = shard.get<std::string>();
      const fs::path rel(shard_name);
      if (shard_name.empty() || rel.is_absolute() ||
          std::any_of(rel.begin(), rel.end(), [](const fs::path& p) { return p == ".."; }))
        throw Error(idx + ": field 'weight_map." + name + "': shard '" + shard_name +
                    "' is not a file name inside the model directory");
      auto it = shards.find(shard_name);
      if (it == shards.end()) {
        const fs::path shard_path = model_dir / rel;
        if (!fs::exists(shard_path, ec))
          throw Error(idx + ": shard '" + shard_name + "' (holding tensor '" + name +
                      "') does not exist in " + model_dir.string());
        it = shards.emplace(shard_name, SafetensorsFile::open(shard_path)).first;
        ck.files_.push_back(it->second);
      }
      const auto& tensors = it->second->tensors();
      auto t = tensors.find(name);
      if (t == tensors.end())
        throw Error(idx + ": tensor '" + name + "' is mapped to shard " +
                    it->second->path().string() + ", which does not contain it");
      ck.index_.emplace(name, &t->second);
    }
    return ck;
  }
  if (fs::exists(single_path, ec)) {
    ck.files_.push_back(SafetensorsFile::open(single_path));
    for (const auto& [name, info] : ck.files_.back()->tensors()) ck.index_.emplace(name, &info);
    return ck;
  }
  throw Error(model_dir.string() +
              ": no model.safetensors or model.safetensors.index.json in this directory");
}

const TensorInfo* Checkpoint::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second;
}

const TensorInfo& Checkpoint::get(const std::string& name, DType dtype,
                                  const std::vector<int64_t>& shape) const {
  const TensorInfo* t = find(name);
  if (!t) throw Error("tensor '" + name + "' not found in " + dir_.string());
  if (t->dtype != dtype)
    throw Error(t->file + ": tensor '" + name + "': expected dtype " +
                std::string(dtype_name(dtype)) + ", found " + std::string(dtype_name(t->dtype)));
  if (t->shape != shape)
    throw Error(t->file + ": tensor '" + name + "': expected shape " + shape_string(shape) +
                ", found " + shape_string(t->shape));
  return *t;
}

}  // namespace vc
