// A model's identity for the remote prefix cache: KV computed by one checkpoint is
// only ever reused by the same checkpoint.
#pragma once
#include <cstdint>
#include <filesystem>

namespace vc {

/// XXH3-64 of `dir`'s config.json and of every *.safetensors file (by name, size and
/// contents). Files up to 1 GiB are hashed whole; a larger one by its first 1 GiB
/// (the safetensors header and the first tensors) plus 64 evenly spaced 1 MiB
/// samples, so a 140 GB checkpoint costs about 1.1 GB of reading. Throws vc::Error
/// naming a file that cannot be read.
[[nodiscard]] uint64_t model_fingerprint(const std::filesystem::path& dir);

}  // namespace vc
