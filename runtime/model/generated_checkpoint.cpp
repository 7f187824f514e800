// Output directory handling for generated checkpoints.
#include "runtime/model/generated_checkpoint.hpp"

#include <fstream>

#include "kernels/error.hpp"

namespace vc {
namespace fs = std::filesystem;

namespace {

bool is_generated(const fs::path& dir) {
  std::ifstream in(dir / "MODEL_CARD.md");
  std::string first;
  return in && std::getline(in, first) && first == kGeneratedCardMarker;
}

}  // namespace

void prepare_output_dir(const fs::path& dir) {
  const std::string what = "--out '" + dir.string() + "'";
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    throw Error(what + ": exists and is not a directory");
  if (!fs::exists(dir, ec)) {
    fs::create_directories(dir, ec);
    if (ec) throw Error(what + ": cannot create the directory: " + ec.message());
  } else if (!fs::is_empty(dir, ec)) {
    if (!is_generated(dir))
      throw Error(what + ": the directory is not empty and holds no earlier generated "
                         "checkpoint (no MODEL_CARD.md by `vericache model`); refusing to write into it");
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      const std::string n = e.path().filename().string();
      if (n.starts_with("model") && (n.ends_with(".safetensors") || n.ends_with(".index.json")))
        fs::remove(e.path(), ec);
    }
  }
  // Writable? (permissions alone do not say: root, read-only mounts)
  const fs::path probe = dir / ".vericache-write-test";
  {
    std::ofstream out(probe, std::ios::trunc);
    if (!out) throw Error(what + ": the directory is not writable");
  }
  fs::remove(probe, ec);
}

void write_text_file(const fs::path& path, std::string_view text) {
  std::ofstream out(path, std::ios::trunc);
  out.write(text.data(), std::streamsize(text.size()));
  out.close();
  if (!out) throw Error(path.string() + ": cannot write");
}

void copy_tokenizer(const fs::path& from, const fs::path& to) {
  for (const char* name : {"tokenizer.json", "tokenizer_config.json"}) {
    std::error_code ec;
    if (!fs::exists(from / name, ec)) {
      if (std::string(name) == "tokenizer.json")
        throw Error((from / name).string() + ": missing (the tokenizer to copy)");
      continue;
    }
    fs::copy_file(from / name, to / name, fs::copy_options::overwrite_existing, ec);
    if (ec) throw Error((to / name).string() + ": cannot copy the tokenizer: " + ec.message());
  }
}

void write_config(const fs::path& dir, const nlohmann::json& config) {
  write_text_file(dir / "config.json", config.dump(2) + "\n");
}

}  // namespace vc
