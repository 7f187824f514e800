// Safetensors checkpoints (read into memory or mapped): one file, or shards with an index.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kernels/dtype.hpp"

namespace vc {

/// How a checkpoint's files reach memory. `read` (the default) reads each file into
/// anonymous memory on huge pages: decode streams every weight once per step, and
/// from a file mapping's 4 KiB page-cache pages one thread read it at about half the
/// rate (README, "Decode and prefill speed"). `map` maps the files read-only instead
/// (nothing copied, pages shared with the page cache and other processes).
enum class WeightLoad { read, map };
/// Process-wide, for files opened from then on (the CLI's --mmap).
void set_weight_load(WeightLoad how);
[[nodiscard]] WeightLoad weight_load();

/// One tensor inside a loaded file. `data` stays valid while its file is open.
struct TensorInfo {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  const std::byte* data = nullptr;
  size_t nbytes = 0;
  std::string file;  // path of the file holding it (for error messages)
};

/// A single .safetensors file, read (or mapped) read-only. The header is validated on
/// open: JSON, known dtypes, offsets inside the data section, no overlaps, sizes
/// that match dtype x shape. Errors name the file and the tensor.
class SafetensorsFile {
 public:
  [[nodiscard]] static std::unique_ptr<SafetensorsFile> open(const std::filesystem::path& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  [[nodiscard]] const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  [[nodiscard]] const std::filesystem::path& path() const { return path_; }

 private:
  SafetensorsFile() = default;
  std::filesystem::path path_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  std::map<std::string, TensorInfo> tensors_;
};

/// All tensors of a model directory: `model.safetensors`, or the shards listed by
/// `model.safetensors.index.json` ("weight_map"). A tensor the index names must be
/// in the shard it names.
class Checkpoint {
 public:
  [[nodiscard]] static Checkpoint open(const std::filesystem::path& model_dir);

  /// nullptr when absent.
  [[nodiscard]] const TensorInfo* find(const std::string& name) const;
  /// The tensor, checked: throws vc::Error naming the tensor and its file when it is
  /// missing, or its dtype or shape differs from what is expected.
  [[nodiscard]] const TensorInfo& get(const std::string& name, DType dtype,
                                      const std::vector<int64_t>& shape) const;
  [[nodiscard]] size_t tensor_count() const { return index_.size(); }
  /// Number of mapped files (each shard is opened once).
  [[nodiscard]] size_t file_count() const { return files_.size(); }
  [[nodiscard]] const std::filesystem::path& dir() const { return dir_; }

 private:
  std::filesystem::path dir_;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorInfo*> index_;
};

}  // namespace vc
