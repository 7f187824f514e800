// Safetensors writer: plans shards, writes each file's header (8-byte little-endian
// length, JSON padded with spaces to 8 bytes), then streams the tensors' rows,
// generated in blocks of about 16 MiB split across threads and converted to the
// target dtype.
#include "runtime/model/safetensors_writer.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "kernels/cpu/thread_pool.hpp"
#include "kernels/error.hpp"

namespace vc {
namespace {

constexpr size_t kBlockBytes = size_t(16) << 20;  // rows generated per write

std::string shard_name(size_t s, size_t n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", s + 1, n);
  return buf;
}

size_t tensor_bytes(const TensorSpec& t, DType dtype) {
  return t.rows() * t.cols() * dtype_size(dtype);
}

void write_or_throw(std::ofstream& out, const void* data, size_t n,
                    const std::filesystem::path& path) {
  out.write(static_cast<const char*>(data), std::streamsize(n));
  if (!out) throw Error(path.string() + ": write failed (disk full or not writable?)");
}

void write_file(const std::filesystem::path& path, const std::vector<const TensorSpec*>& tensors,
                DType dtype, cpu::ThreadPool& pool) {
  nlohmann::json header = nlohmann::json::object();
  header["__metadata__"] = {{"format", "pt"}};
  size_t offset = 0;
  for (const TensorSpec* t : tensors) {
    const size_t n = tensor_bytes(*t, dtype);
    header[t->name] = {{"dtype", std::string(dtype_name(dtype))},
                       {"shape", t->shape},
                       {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  std::string text = header.dump();
  while (text.size() % 8 != 0) text += ' ';
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw Error(path.string() + ": cannot create file");
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>((uint64_t(text.size()) >> (8 * i)) & 0xff);
  write_or_throw(out, len, 8, path);
  write_or_throw(out, text.data(), text.size(), path);

  std::vector<float> rows_f32;
  std::vector<std::byte> rows_out;
  for (const TensorSpec* t : tensors) {
    const size_t cols = t->cols(), rows = t->rows();
    const size_t block = std::max<size_t>(1, kBlockBytes / (cols * 4));
    for (size_t r0 = 0; r0 < rows; r0 += block) {
      const size_t nr = std::min(block, rows - r0);
      rows_f32.resize(nr * cols);
      rows_out.resize(nr * cols * dtype_size(dtype));
      pool.parallel_for(nr, 1, [&](size_t b, size_t e) {
        for (size_t i = b; i < e; ++i) t->fill(r0 + i, rows_f32.data() + i * cols);
        from_f32(dtype, rows_f32.data() + b * cols, rows_out.data() + b * cols * dtype_size(dtype),
                 (e - b) * cols);
      });
      write_or_throw(out, rows_out.data(), rows_out.size(), path);
    }
  }
  out.close();
  if (!out) throw Error(path.string() + ": write failed on close");
}

}  // namespace

WrittenCheckpoint write_checkpoint(const std::filesystem::path& dir,
                                   const std::vector<TensorSpec>& tensors, DType dtype,
                                   size_t max_shard_bytes, int threads) {
  for (const TensorSpec& t : tensors)
    if (t.shape.empty() || t.shape.size() > 2 || t.shape.front() <= 0 || t.shape.back() <= 0 || !t.fill)
      throw Error("write_checkpoint: tensor '" + t.name + "' needs 1 or 2 positive dimensions and a fill");
  // Shards in tensor order: a new one starts when the next tensor would pass the limit.
  std::vector<std::vector<const TensorSpec*>> shards(1);
  size_t in_shard = 0;
  WrittenCheckpoint w;
  for (const TensorSpec& t : tensors) {
    const size_t n = tensor_bytes(t, dtype);
    if (in_shard > 0 && in_shard + n > max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(&t);
    in_shard += n;
    w.total_bytes += n;
    w.parameters += t.rows() * t.cols();
  }
  cpu::ThreadPool pool(std::max(1, threads));
  if (shards.size() == 1) {
    w.files.push_back(dir / "model.safetensors");
    write_file(w.files.back(), shards[0], dtype, pool);
    return w;
  }
  nlohmann::json weight_map = nlohmann::json::object();
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string name = shard_name(s, shards.size());
    for (const TensorSpec* t : shards[s]) weight_map[t->name] = name;
    w.files.push_back(dir / name);
    write_file(w.files.back(), shards[s], dtype, pool);
  }
  const std::filesystem::path index = dir / "model.safetensors.index.json";
  std::ofstream out(index, std::ios::trunc);
  out << nlohmann::json{{"metadata", {{"total_size", w.total_bytes}}}, {"weight_map", weight_map}}
             .dump(2)
      << "\n";
  out.close();
  if (!out) throw Error(index.string() + ": cannot write");
  return w;
}

}  // namespace vc
