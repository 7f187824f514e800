// Fuzzes the safetensors reader. The first byte picks what the rest is:
//   even: a whole .safetensors file (8-byte length, JSON header, data), opened with
//         SafetensorsFile::open; every tensor it accepts is read end to end.
//   odd:  a model.safetensors.index.json next to two small valid shards
//         (a.safetensors: x, y; b.safetensors: z), opened with Checkpoint::open.
// Only vc::Error may come out.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/error.hpp"
#include "runtime/model/safetensors.hpp"
#include "tests/fuzz/fuzz_support.hpp"

namespace {

// A valid file holding F32 tensors `names`, each of shape [2].
std::string shard(const std::vector<std::string>& names) {
  std::string header = "{";
  for (size_t i = 0; i < names.size(); ++i)
    header += (i ? "," : "") + std::string("\"") + names[i] +
              "\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[" + std::to_string(8 * i) +
              "," + std::to_string(8 * i + 8) + "]}";
  header += "}";
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char((n >> (8 * i)) & 0xff);
  return out + header + std::string(8 * names.size(), '\x01');
}

// Reads every byte of every tensor (an out-of-mapping pointer faults here).
unsigned touch(const vc::TensorInfo& t) {
  unsigned sum = 0;
  for (size_t i = 0; i < t.nbytes; ++i) sum += unsigned(t.data[i]);
  return sum;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view rest = vc::fuzz::as_text(data + 1, size - 1);
  volatile unsigned sink = 0;
  try {
    if ((data[0] & 1) == 0) {
      const auto f = vc::SafetensorsFile::open(vc::fuzz::write_file("x.safetensors", rest));
      for (const auto& [name, t] : f->tensors()) sink = sink + touch(t);
    } else {
      static const std::filesystem::path dir = [] {
        const auto d = vc::fuzz::scratch_dir() / "model";
        std::filesystem::create_directories(d);
        (void)vc::fuzz::write_file("model/a.safetensors", shard({"x", "y"}));
        (void)vc::fuzz::write_file("model/b.safetensors", shard({"z"}));
        return d;
      }();
      (void)vc::fuzz::write_file("model/model.safetensors.index.json", rest);
      const vc::Checkpoint ck = vc::Checkpoint::open(dir);
      for (const char* name : {"x", "y", "z"})
        if (const vc::TensorInfo* t = ck.find(name)) sink = sink + touch(*t);
    }
  } catch (const vc::Error&) {
  }
  return 0;
}
