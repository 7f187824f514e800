// Reading and writing kvzap.safetensors (see kvzap_file.hpp).
#include "runtime/kvzap_file.hpp"

#include <algorithm>
#include <cmath>
#include <charconv>
#include <string_view>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <system_error>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/dtype.hpp"
#include "kernels/error.hpp"
#include "runtime/model/safetensors.hpp"

namespace vc {
namespace {

std::string shape_text(const std::vector<int64_t>& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

// Tensor `name` of `file`, converted to fp32, checked against `shape`.
std::vector<float> read_tensor(const SafetensorsFile& file, const std::string& name,
                               const std::vector<int64_t>& shape) {
  const std::string where = file.path().string() + ": tensor '" + name + "'";
  auto it = file.tensors().find(name);
  if (it == file.tensors().end()) throw Error(where + " is missing");
  const TensorInfo& t = it->second;
  if (t.shape != shape)
    throw Error(where + " has shape " + shape_text(t.shape) + ", expected " + shape_text(shape));
  size_t count = 1;
  for (int64_t d : shape) count *= size_t(d);
  std::vector<float> out(count);
  to_f32(t.dtype, t.data, out.data(), count);
  for (float x : out)
    if (!std::isfinite(x)) throw Error(where + " holds a non-finite value");
  return out;
}

}  // namespace

std::shared_ptr<const KvzapSurrogate> load_kvzap(const std::filesystem::path& path,
                                                 const ModelConfig& cfg) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw Error("kvzap: no surrogate file " + path.string() +
                " (make one with: vericache calibrate kvzap --model DIR --data FILES)");
  const auto file = SafetensorsFile::open(path);
  auto m = std::make_shared<KvzapSurrogate>();
  m->dim = size_t(cfg.hidden_size);
  m->kv_heads = size_t(cfg.num_kv_heads);
  const auto& ts = file->tensors();
  const bool mlp = ts.count("layers.0.fc1.weight") > 0;
  m->form = mlp ? KvzapForm::mlp : KvzapForm::linear;
  if (mlp) {
    const TensorInfo& fc1 = ts.at("layers.0.fc1.weight");
    if (fc1.shape.size() != 2 || fc1.shape[0] <= 0)
      throw Error(path.string() + ": tensor 'layers.0.fc1.weight' has shape " +
                  shape_text(fc1.shape) + ", expected [units, " + std::to_string(m->dim) + "]");
    m->units = size_t(fc1.shape[0]);
  }
  const int64_t D = int64_t(m->dim), G = int64_t(m->kv_heads), U = int64_t(m->units);
  const size_t L = size_t(cfg.num_layers);
  m->layers.resize(L);
  for (size_t l = 0; l < L; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    KvzapLayer& y = m->layers[l];
    if (!mlp) {
      y.w1 = read_tensor(*file, p + "weight", {G, D});
      y.b1 = read_tensor(*file, p + "bias", {G});
    } else {
      y.w1 = read_tensor(*file, p + "fc1.weight", {U, D});
      y.b1 = read_tensor(*file, p + "fc1.bias", {U});
      y.w2 = read_tensor(*file, p + "fc2.weight", {G, U});
      y.b2 = read_tensor(*file, p + "fc2.bias", {G});
    }
  }
  // Every tensor is one read above: a layer past the model's, or a misspelt name, is
  // not silently dropped.
  const std::vector<std::string> leaves = mlp ? std::vector<std::string>{"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}
                                              : std::vector<std::string>{"weight", "bias"};
  for (const auto& [name, t] : ts) {
    // "layers.<l>.<leaf>": l and where the leaf starts (used), when the name has them.
    size_t l = 0, used = 0;
    const std::string_view prefix = "layers.";
    bool layered = false;
    if (name.starts_with(prefix)) {
      const char* first = name.data() + prefix.size();
      const auto [end, ec] = std::from_chars(first, name.data() + name.size(), l);
      used = size_t(end - name.data()) + 1;
      layered = ec == std::errc() && end != first && used <= name.size() && *end == '.';
    }
    if (layered && l >= L)
      throw Error(path.string() + ": tensor '" + name + "' is for a layer the model (" +
                  std::to_string(L) + " layers) does not have");
    if (!layered || std::find(leaves.begin(), leaves.end(), name.substr(size_t(used))) == leaves.end() ||
        name != "layers." + std::to_string(l) + "." + name.substr(size_t(used))) {
      std::string known;
      for (const std::string& leaf : leaves) known += (known.empty() ? "layers.N." : ", layers.N.") + leaf;
      throw Error(path.string() + ": tensor '" + name + "' is not one of a " + (mlp ? "two-layer" : "linear") +
                  " surrogate's (" + known + ")");
    }
  }
  m->validate();
  return m;
}

void save_kvzap(const std::filesystem::path& path, const KvzapSurrogate& m,
                const std::map<std::string, std::string>& metadata) {
  m.validate();
  struct Entry {
    std::string name;
    std::vector<int64_t> shape;
    const std::vector<float>* data;
  };
  std::vector<Entry> entries;
  const int64_t D = int64_t(m.dim), G = int64_t(m.kv_heads), U = int64_t(m.units);
  for (size_t l = 0; l < m.layers.size(); ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    const KvzapLayer& y = m.layers[l];
    if (m.form == KvzapForm::linear) {
      entries.push_back({p + "weight", {G, D}, &y.w1});
      entries.push_back({p + "bias", {G}, &y.b1});
    } else {
      entries.push_back({p + "fc1.weight", {U, D}, &y.w1});
      entries.push_back({p + "fc1.bias", {U}, &y.b1});
      entries.push_back({p + "fc2.weight", {G, U}, &y.w2});
      entries.push_back({p + "fc2.bias", {G}, &y.b2});
    }
  }
  nlohmann::ordered_json header;
  nlohmann::ordered_json meta = {{"format", "pt"}, {"form", std::string(kvzap_form_name(m.form))}};
  for (const auto& [k, v] : metadata) meta[k] = v;
  header["__metadata__"] = meta;
  uint64_t offset = 0;
  for (const Entry& e : entries) {
    const uint64_t bytes = e.data->size() * sizeof(float);
    header[e.name] = {{"dtype", "F32"}, {"shape", e.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // data starts 8-byte aligned
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw Error("kvzap: cannot write " + path.string());
  const uint64_t n = text.size();
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));  // little-endian
  out.write(reinterpret_cast<const char*>(len), 8);
  out.write(text.data(), std::streamsize(text.size()));
  for (const Entry& e : entries) {
    for (float f : *e.data) {  // little-endian fp32
      uint32_t u;
      std::memcpy(&u, &f, 4);
      unsigned char b[4] = {static_cast<unsigned char>(u), static_cast<unsigned char>(u >> 8),
                            static_cast<unsigned char>(u >> 16), static_cast<unsigned char>(u >> 24)};
      out.write(reinterpret_cast<const char*>(b), 4);
    }
  }
  out.flush();
  if (!out) throw Error("kvzap: writing " + path.string() + " failed");
}

std::shared_ptr<const HiddenScorer> attach_model_files(Compressor& c, const Model& model) {
  const std::string_view file = c.model_file();
  if (file.empty()) return nullptr;
  // A shard scores with the whole surrogate (one output per KV head of the whole
  // model): its layer inputs are the whole hidden states, the same on every rank.
  auto s = load_kvzap(model.dir() / std::string(file), model.whole_config());
  c.set_surrogate(s);
  return s;
}

}  // namespace vc
