// Model fingerprint (see the header).
#include "runtime/model/fingerprint.hpp"

#include <xxhash.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "kernels/error.hpp"

namespace vc {

namespace {

constexpr uint64_t kWhole = uint64_t(1) << 30, kSample = uint64_t(1) << 20, kSamples = 64;

void hash_range(XXH3_state_t* st, std::ifstream& in, const std::filesystem::path& f, uint64_t at,
                uint64_t n, std::vector<char>& buf) {
  in.seekg(std::streamoff(at));
  while (n > 0) {
    const size_t m = size_t(std::min<uint64_t>(n, buf.size()));
    if (!in.read(buf.data(), std::streamsize(m))) throw Error(f.string() + ": cannot read for the model fingerprint");
    XXH3_64bits_update(st, buf.data(), m);
    n -= m;
  }
}

}  // namespace

uint64_t model_fingerprint(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> files{dir / "config.json"};
  std::vector<std::filesystem::path> shards;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (e.path().extension() == ".safetensors") shards.push_back(e.path());
  if (ec) throw Error(dir.string() + ": cannot list the model directory: " + ec.message());
  std::sort(shards.begin(), shards.end());
  files.insert(files.end(), shards.begin(), shards.end());

  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  std::vector<char> buf(size_t(1) << 20);
  try {
    for (const auto& f : files) {
      std::ifstream in(f, std::ios::binary);
      if (!in) throw Error(f.string() + ": cannot open for the model fingerprint");
      const uint64_t size = std::filesystem::file_size(f);
      const std::string name = f.filename().string();
      XXH3_64bits_update(st, name.data(), name.size());
      XXH3_64bits_update(st, &size, sizeof(size));
      hash_range(st, in, f, 0, std::min(size, kWhole), buf);
      if (size > kWhole) {
        const uint64_t rest = size - kWhole, n = std::min(kSample, rest);
        for (uint64_t i = 0; i < kSamples; ++i)
          hash_range(st, in, f, kWhole + (rest - n) / (kSamples - 1) * i, n, buf);
      }
    }
  } catch (...) {
    XXH3_freeState(st);
    throw;
  }
  const uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return h;
}

}  // namespace vc
