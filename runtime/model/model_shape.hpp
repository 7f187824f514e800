// Model shapes: the fields of a Hugging Face config.json that fix a model's memory
// and compute (configs/shapes/*.json), without weights. `vericache model random`
// and `vericache model scale` turn one into a checkpoint.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/model/config.hpp"

namespace vc {

/// A shape read from a JSON file and validated as a config.json.
struct ModelShape {
  std::string name;            // the file's stem ("llama-3.2-1b")
  std::filesystem::path file;  // where it was read from
  nlohmann::json config;       // the file's fields, keys starting with '_' removed
  ModelConfig parsed;          // `config` validated (torch_dtype aside)
};

/// The shape names in `shapes_dir` (its *.json stems), sorted.
[[nodiscard]] std::vector<std::string> shape_names(const std::filesystem::path& shapes_dir);

/// `name_or_file` is a path when it names an existing file or ends in ".json", else a
/// name in `shapes_dir`. Throws vc::Error naming the shape (and the known names when
/// it is unknown) or the file and field that is wrong.
[[nodiscard]] ModelShape load_shape(const std::string& name_or_file,
                                    const std::filesystem::path& shapes_dir);

}  // namespace vc
