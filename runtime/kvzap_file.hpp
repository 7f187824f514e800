// kvzap.safetensors: KVzap's per-layer surrogate stored beside a model's weights.
// Tensors, all F32 (BF16 and F16 are read too), for each layer l of the model:
//   linear: layers.l.weight [kv_heads, hidden], layers.l.bias [kv_heads]
//   mlp:    layers.l.fc1.weight [units, hidden], layers.l.fc1.bias [units],
//           layers.l.fc2.weight [kv_heads, units], layers.l.fc2.bias [kv_heads]
// The form is told by which names are present; __metadata__ records it, the
// calibration command and the R^2 of each layer, for people reading the file.
#pragma once
#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "kvtiers/compressor.hpp"
#include "kvtiers/kvzap/surrogate.hpp"
#include "runtime/model.hpp"
#include "runtime/model/config.hpp"

namespace vc {

/// The file name KVzap looks for in the model directory.
inline constexpr const char* kKvzapFileName = "kvzap.safetensors";

/// Loads and checks the surrogate at `path` for a model of config `cfg`. Throws
/// vc::Error naming the file when it is missing or unreadable, and the tensor when
/// one is missing, of another shape or dtype, or holds a non-finite value.
[[nodiscard]] std::shared_ptr<const KvzapSurrogate> load_kvzap(const std::filesystem::path& path,
                                                               const ModelConfig& cfg);

/// Writes `m` (validated first) to `path` as described above, with `metadata` added
/// to the header's __metadata__. Throws vc::Error naming the file on an I/O error.
void save_kvzap(const std::filesystem::path& path, const KvzapSurrogate& m,
                const std::map<std::string, std::string>& metadata = {});

/// Gives `c` what it loads from beside the model (KVzap: kvzap.safetensors in
/// model.dir()); nothing for methods that need no file. Returns the method's hidden
/// scorer (KVzap's surrogate, shared, so that a verify pass on another thread can
/// hold it), or null.
std::shared_ptr<const HiddenScorer> attach_model_files(Compressor& c, const Model& model);

}  // namespace vc
