// KVzap's per-layer surrogate: scoring one row at a time (see surrogate.hpp).
#include "kvtiers/kvzap/surrogate.hpp"

#include <cmath>
#include <string>
#include <vector>

#include "kernels/error.hpp"

namespace vc {

std::string_view kvzap_form_name(KvzapForm f) { return f == KvzapForm::linear ? "linear" : "mlp"; }

KvzapForm parse_kvzap_form(const std::string& text) {
  if (text == "linear") return KvzapForm::linear;
  if (text == "mlp") return KvzapForm::mlp;
  throw Error("kvzap: unknown surrogate form '" + text + "' (expected linear or mlp)");
}

namespace {

void check(const std::vector<float>& t, size_t want, size_t layer, const char* tensor) {
  if (t.size() != want)
    throw Error("kvzap surrogate: layer " + std::to_string(layer) + " tensor " + tensor + " has " +
                std::to_string(t.size()) + " values, expected " + std::to_string(want));
  for (float x : t)
    if (!std::isfinite(x))
      throw Error("kvzap surrogate: layer " + std::to_string(layer) + " tensor " + tensor +
                  " holds a non-finite value");
}

// Row `x` (dim) through w [out][dim] + b, in double, one fixed order per output.
void affine(const float* w, const float* b, const float* x, size_t out, size_t dim, float* y) {
  for (size_t o = 0; o < out; ++o) {
    const float* wr = w + o * dim;
    double acc = 0;
    for (size_t i = 0; i < dim; ++i) acc += double(wr[i]) * double(x[i]);
    y[o] = float(acc + double(b[o]));
  }
}

}  // namespace

void KvzapSurrogate::validate() const {
  if (dim == 0 || kv_heads == 0) throw Error("kvzap surrogate: dim and kv_heads must be positive");
  if (form == KvzapForm::mlp && units == 0)
    throw Error("kvzap surrogate: the mlp form needs hidden units > 0");
  const size_t out1 = form == KvzapForm::linear ? kv_heads : units;
  for (size_t l = 0; l < layers.size(); ++l) {
    const KvzapLayer& L = layers[l];
    check(L.w1, out1 * dim, l, form == KvzapForm::linear ? "weight" : "fc1.weight");
    check(L.b1, out1, l, form == KvzapForm::linear ? "bias" : "fc1.bias");
    check(L.w2, form == KvzapForm::mlp ? kv_heads * units : 0, l, "fc2.weight");
    check(L.b2, form == KvzapForm::mlp ? kv_heads : 0, l, "fc2.bias");
  }
}

void KvzapSurrogate::score_row(size_t layer, const float* x, float* out) const {
  const KvzapLayer& L = layers.at(layer);
  if (form == KvzapForm::linear) {
    affine(L.w1.data(), L.b1.data(), x, kv_heads, dim, out);
    return;
  }
  std::vector<float> h(units);
  affine(L.w1.data(), L.b1.data(), x, units, dim, h.data());
  for (float& v : h) v = float(0.5 * double(v) * (1.0 + std::erf(double(v) / std::sqrt(2.0))));
  affine(L.w2.data(), L.b2.data(), h.data(), kv_heads, units, out);
}

void KvzapSurrogate::score(size_t layer, const float* x, size_t rows, size_t d, float* out) const {
  if (d != dim)
    throw Error("kvzap surrogate: hidden states have " + std::to_string(d) +
                " values per row, the surrogate takes " + std::to_string(dim));
  if (layer >= layers.size())
    throw Error("kvzap surrogate: layer " + std::to_string(layer) + " of " +
                std::to_string(layers.size()));
  for (size_t r = 0; r < rows; ++r) score_row(layer, x + r * dim, out + r * kv_heads);
}

}  // namespace vc
