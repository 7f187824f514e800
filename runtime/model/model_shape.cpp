// Reading configs/shapes/*.json: a bounded read, the config.json validation of
// parse_model_config, and helpful errors for unknown names.
#include "runtime/model/model_shape.hpp"

#include <algorithm>

#include "kernels/error.hpp"
#include "runtime/model/bounded_input.hpp"

namespace vc {

std::vector<std::string> shape_names(const std::filesystem::path& shapes_dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(shapes_dir, ec))
    if (e.path().extension() == ".json") names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

ModelShape load_shape(const std::string& name_or_file, const std::filesystem::path& shapes_dir) {
  std::filesystem::path file = name_or_file;
  std::error_code ec;
  const bool is_path = name_or_file.ends_with(".json") || std::filesystem::is_regular_file(file, ec);
  if (!is_path) {
    file = shapes_dir / (name_or_file + ".json");
    if (!std::filesystem::is_regular_file(file, ec)) {
      std::string known;
      for (const std::string& n : shape_names(shapes_dir)) known += (known.empty() ? "" : ", ") + n;
      throw Error("--shape: unknown shape '" + name_or_file + "' (known: " +
                  (known.empty() ? "none in " + shapes_dir.string() : known) +
                  "; or give a path to a config.json-like file)");
    }
  }
  const std::string text = read_file_bounded(file, kMaxTextFileBytes, "--shape '" + file.string() + "'");
  nlohmann::json j = parse_json_bounded(text, file.string());
  if (!j.is_object()) throw Error(file.string() + ": expected a JSON object");
  for (auto it = j.begin(); it != j.end();)
    it = it.key().starts_with("_") ? j.erase(it) : std::next(it);
  ModelShape s;
  s.name = file.stem().string();
  s.file = file;
  s.parsed = parse_model_config(j, file.string());
  s.config = std::move(j);
  return s;
}

}  // namespace vc
