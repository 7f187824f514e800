// KV quantizers (KIVI, KVQuant, RotateKV) and the Hadamard rotation: round-trip
// error bounds, outliers, RoPE handling and stored bytes (the registry, ratio
// mapping and composition are in compressor_registry_test.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>

#include "kernels/dtype.hpp"
#include "kernels/error.hpp"
#include "kvtiers/compressed_tier.hpp"
#include "kvtiers/compressor.hpp"
#include "kvtiers/compressors/factories.hpp"
#include "kvtiers/compressors/hadamard.hpp"
#include "kvtiers/compressors/uniform_quant.hpp"

namespace vc {
namespace {

std::vector<float> normal(size_t n, uint32_t seed, float sd = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sd);
  std::vector<float> x(n);
  for (float& e : x) e = dist(rng);
  return x;
}

float bf16(float x) { return bf16_to_f32(f32_to_bf16(x)); }
float f16(float x) { return f16_to_f32(f32_to_f16(x)); }

/// Bound on |x - x_hat| for a group with range [m, M] at `bits`: half the stored
/// (fp16) scale, plus the slack from rounding scale and zero to fp16 (relative
/// 2^-11 each; it only matters where a code is clamped at either end), plus fp32.
float group_bound(float m, float M, int bits) {
  const float scale = f16((M - m) / float((1 << bits) - 1));
  return scale / 2 + std::ldexp(std::fabs(m) + (M - m), -11) + 1e-6f;
}

std::vector<int32_t> iota_positions(size_t n) {
  std::vector<int32_t> p(n);
  std::iota(p.begin(), p.end(), 0);
  return p;
}

/// Rotate-half RoPE in double (sign -1 undoes it).
void rope(float* x, size_t d, const std::vector<float>& inv, double pos, double sign) {
  for (size_t i = 0; i < d / 2; ++i) {
    const double a = sign * pos * double(inv[i]), x1 = x[i], x2 = x[i + d / 2];
    x[i] = float(x1 * std::cos(a) - x2 * std::sin(a));
    x[i + d / 2] = float(x2 * std::cos(a) + x1 * std::sin(a));
  }
}

ModelFacts rope_model(size_t d, size_t n, int32_t offset) {
  ModelFacts m;
  m.heads = 4;
  for (size_t i = 0; i < d / 2; ++i) m.rope_inv_freq.push_back(float(std::pow(10000.0, -2.0 * double(i) / double(d))));
  for (size_t p = 0; p < n; ++p) m.positions.push_back(int32_t(p) + offset);
  return m;
}

TEST(kivi, round_trip_error_is_within_its_bound_at_2_and_4_bits_and_residual_rows_are_exact_bf16) {
  const size_t n = 100, d = 64, gs = 32;  // residual 32: keys 64 rows quantized, values 68
  const std::vector<float> k0 = normal(n * d, 1), v0 = normal(n * d, 2, 2.0f);
  const std::vector<int32_t> pos = iota_positions(n);
  for (int bits : {2, 4}) {
    auto c = make_kivi();
    c->set_param("key_bits", bits);
    c->set_param("value_bits", bits);
    std::vector<float> k = k0, v = v0;
    (void)c->quantize(0, 0, pos.data(), n, d, ModelFacts{}, k.data(), v.data());
    for (size_t t0 = 0; t0 < 64; t0 += gs) {  // keys: per channel, groups along tokens
      for (size_t ch = 0; ch < d; ++ch) {
        float m = INFINITY, M = -INFINITY;
        std::set<float> levels;
        for (size_t r = t0; r < t0 + gs; ++r) m = std::min(m, k0[r * d + ch]), M = std::max(M, k0[r * d + ch]);
        for (size_t r = t0; r < t0 + gs; ++r) {
          EXPECT_LE(std::fabs(k[r * d + ch] - k0[r * d + ch]), group_bound(m, M, bits)) << bits << " key " << r;
          levels.insert(k[r * d + ch]);
        }
        EXPECT_LE(levels.size(), size_t(1) << bits);
      }
    }
    for (size_t r = 0; r < 68; ++r) {  // values: per token, groups of channels
      for (size_t c0 = 0; c0 < d; c0 += gs) {
        const auto b = v0.begin() + std::ptrdiff_t(r * d + c0);
        const float m = *std::min_element(b, b + gs), M = *std::max_element(b, b + gs);
        for (size_t ch = c0; ch < c0 + gs; ++ch) {
          EXPECT_LE(std::fabs(v[r * d + ch] - v0[r * d + ch]), group_bound(m, M, bits)) << bits << " value " << r;
        }
      }
    }
    for (size_t i = 64 * d; i < n * d; ++i) EXPECT_EQ(k[i], bf16(k0[i]));
    for (size_t i = 68 * d; i < n * d; ++i) EXPECT_EQ(v[i], bf16(v0[i]));
  }
}

TEST(hadamard, the_rotation_is_orthonormal_invertible_and_preserves_norms) {
  for (size_t n : {size_t(64), size_t(128)}) {
    std::vector<float> h(n * n, 0.0f);  // column j = H e_j
    for (size_t j = 0; j < n; ++j) {
      std::vector<float> e(n, 0.0f);
      e[j] = 1.0f;
      hadamard_inplace(e.data(), n);
      for (size_t i = 0; i < n; ++i) h[i * n + j] = e[i];
    }
    for (size_t i = 0; i < n; ++i) {
      for (size_t j = 0; j < n; ++j) {
        double dot = 0;
        for (size_t t = 0; t < n; ++t) dot += double(h[i * n + t]) * h[j * n + t];
        EXPECT_NEAR(dot, i == j ? 1.0 : 0.0, 1e-6);
      }
    }
    const std::vector<float> x0 = normal(n, 7);
    std::vector<float> x = x0;
    hadamard_inplace(x.data(), n);
    double a = 0, b = 0;
    for (size_t i = 0; i < n; ++i) a += double(x0[i]) * x0[i], b += double(x[i]) * x[i];
    EXPECT_NEAR(std::sqrt(b), std::sqrt(a), 1e-5 * std::sqrt(a));
    hadamard_inplace(x.data(), n);
    for (size_t i = 0; i < n; ++i) EXPECT_NEAR(x[i], x0[i], 1e-5);
  }
  std::vector<float> odd(48);
  EXPECT_THROW(hadamard_inplace(odd.data(), odd.size()), Error);
}

TEST(rotate_kv, two_bit_error_with_an_outlier_channel_is_smaller_than_plain_per_token_quantization) {
  const size_t n = 64, d = 64, gs = 32;
  std::vector<float> x = normal(n * d, 3);
  for (size_t r = 0; r < n; ++r) x[r * d + 5] += 20.0f;  // one huge outlier channel
  auto c = make_rotate_kv();
  c->set_param("key_bits", 2);
  c->set_param("value_bits", 2);
  std::vector<float> k = x, v = x, plain = x;
  const std::vector<int32_t> pos = iota_positions(n);
  (void)c->quantize(0, 0, pos.data(), n, d, ModelFacts{}, k.data(), v.data());
  for (size_t r = 0; r < n; ++r) {
    for (size_t c0 = 0; c0 < d; c0 += gs) (void)quantize_group(plain.data() + r * d + c0, gs, 1, 2);
  }
  double e_rot = 0, e_plain = 0;
  for (size_t i = 0; i < n * d; ++i) {
    e_rot += std::pow(double(k[i]) - x[i], 2);
    e_plain += std::pow(double(plain[i]) - x[i], 2);
  }
  EXPECT_LT(e_rot, 0.6 * e_plain) << "rotated MSE " << e_rot / double(n * d) << " plain " << e_plain / double(n * d);
  EXPECT_EQ(k, v);  // same data, same treatment
  std::vector<float> k48(4 * 48), v48(4 * 48);
  EXPECT_THROW((void)c->quantize(0, 0, pos.data(), 4, 48, ModelFacts{}, k48.data(), v48.data()), Error);
}

TEST(kvquant, keeps_planted_outliers_exactly_and_quantizes_the_rest_without_them) {
  const size_t n = 64, d = 64;
  const ModelFacts model = rope_model(d, n, 100);
  std::vector<float> k_pre = normal(n * d, 4), v0 = normal(n * d, 5);
  std::vector<size_t> planted;
  for (size_t j = 0; j < 10; ++j) {
    const size_t i = (j * 397 + 11) % (n * d);
    planted.push_back(i);
    k_pre[i] = (j % 2 ? -1.0f : 1.0f) * (40.0f + float(j) * 0.5f);  // bf16-exact
    v0[i] = (j % 2 ? 1.0f : -1.0f) * (50.0f + float(j));
  }
  std::vector<float> k0 = k_pre;
  for (size_t r = 0; r < n; ++r) rope(&k0[r * d], d, model.rope_inv_freq, 100.0 + double(r), 1.0);
  auto c = make_kvquant();
  c->set_param("key_bits", 4);
  c->set_param("value_bits", 4);
  std::vector<float> k = k0, v = v0;
  const std::vector<int32_t>& pos = model.positions;  // absolute positions
  const size_t bytes = c->quantize(0, 0, pos.data(), n, d, model, k.data(), v.data());
  const size_t outliers = 41;  // ceil(0.01 * 4096) per side, 6 bytes each
  EXPECT_EQ(bytes, 2 * (n * d / 2) + d * 4 + n * 4 + 2 * outliers * 6);
  for (size_t r = 0; r < n; ++r) rope(&k[r * d], d, model.rope_inv_freq, 100.0 + double(r), -1.0);
  for (size_t i = 0; i < n * d; ++i) {
    const bool is_planted = std::find(planted.begin(), planted.end(), i) != planted.end();
    if (is_planted) {
      EXPECT_EQ(v[i], v0[i]);
      EXPECT_NEAR(k[i], k_pre[i], 1e-4);
    } else {  // ranges without the outliers: scale ~ 5/15, error <= scale/2
      EXPECT_LE(std::fabs(v[i] - v0[i]), 0.3f) << i;
      EXPECT_LE(std::fabs(k[i] - k_pre[i]), 0.3f) << i;
    }
  }
  std::vector<float> k2 = k0, v2 = v0;
  EXPECT_THROW((void)c->quantize(0, 0, pos.data(), n, d, ModelFacts{}, k2.data(), v2.data()), Error);
}

TEST(kvquant, undoes_and_redoes_rope_correctly) {
  const size_t n = 48, d = 64;
  const ModelFacts model = rope_model(d, n, 37);
  const std::vector<int32_t>& pos = model.positions;  // absolute positions
  // 16 bits: pre-RoPE keys stored in bf16. With bf16-exact pre-RoPE keys the round
  // trip is the identity only if RoPE is undone exactly (else bf16 rounding shows).
  std::vector<float> k_pre = normal(n * d, 6);
  for (float& e : k_pre) e = bf16(e);
  std::vector<float> k0 = k_pre;
  for (size_t r = 0; r < n; ++r) rope(&k0[r * d], d, model.rope_inv_freq, 37.0 + double(r), 1.0);
  auto c = make_kvquant();
  c->set_param("key_bits", 16);
  c->set_param("value_bits", 16);
  std::vector<float> k = k0, v = k0;
  EXPECT_EQ(c->quantize(0, 0, pos.data(), n, d, model, k.data(), v.data()), n * d * 2 * 2);
  for (size_t i = 0; i < n * d; ++i) EXPECT_NEAR(k[i], k0[i], 1e-5) << i;
  // Through the compressed tier, which maps snapshot indices to absolute positions.
  KvSnapshot kv;
  kv.layers = 1, kv.kv_heads = 1, kv.head_dim = d, kv.n_pos = n, kv.k = k0, kv.v = k0;
  const CompressedView view =
      CompressedView::build(kv, c->plan(CompressorInput{kv, nullptr, model, 4.0}), *c, model);
  EXPECT_EQ(view.stored_bytes(), n * d * 2 * 2);
  for (size_t i = 0; i < n * d; ++i) EXPECT_NEAR(view.k(0, 0)[i], k0[i], 1e-5) << i;
  // 2 bits on pre-RoPE keys that sit on the 2-bit grid {-1.5, -0.5, 0.5, 1.5} of
  // every channel: exact only if quantization happens before RoPE.
  std::mt19937 rng(8);
  for (size_t i = 0; i < n * d; ++i) k_pre[i] = -1.5f + float(rng() % 4);
  for (size_t ch = 0; ch < d; ++ch) k_pre[ch] = -1.5f, k_pre[d + ch] = 1.5f;
  k0 = k_pre;
  for (size_t r = 0; r < n; ++r) rope(&k0[r * d], d, model.rope_inv_freq, 37.0 + double(r), 1.0);
  c->set_param("key_bits", 2);
  c->set_param("outlier_fraction", 0);
  k = k0;
  v = k0;
  (void)c->quantize(0, 0, pos.data(), n, d, model, k.data(), v.data());
  for (size_t i = 0; i < n * d; ++i) EXPECT_NEAR(k[i], k0[i], 1e-5) << i;
}

TEST(kivi, stored_bytes_at_4_bits_are_a_quarter_of_bf16_plus_scales_and_residual) {
  const size_t n = 100, d = 64, gs = 32, res = 32;
  auto c = make_kivi();
  c->set_param("key_bits", 4);
  c->set_param("value_bits", 4);
  std::vector<float> k = normal(n * d, 9), v = normal(n * d, 10);
  const std::vector<int32_t> pos = iota_positions(n);
  const size_t bytes = c->quantize(0, 0, pos.data(), n, d, ModelFacts{}, k.data(), v.data());
  const size_t nk = (n - res) / gs * gs, nv = n - res;  // 64 key rows, 68 value rows
  const size_t key = nk * d * 2 / 4 + (nk / gs) * d * 4 + (n - nk) * d * 2;
  const size_t value = nv * d * 2 / 4 + nv * (d / gs) * 4 + (n - nv) * d * 2;
  EXPECT_EQ(bytes, key + value);
  EXPECT_EQ(bytes, 13984u);
  // No residual, long sequence: a quarter of bf16 plus 2 fp16 per 32 elements.
  c->set_param("residual", 0);
  const size_t m = 1024;
  std::vector<float> k2 = normal(m * d, 11), v2 = normal(m * d, 12);
  const std::vector<int32_t> pos2 = iota_positions(m);
  const size_t b2 = c->quantize(0, 0, pos2.data(), m, d, ModelFacts{}, k2.data(), v2.data());
  EXPECT_EQ(b2, 2 * (m * d / 2 + m * d / gs * 4));
  EXPECT_NEAR(double(b2) / double(m * d * 4), 0.25 + 4.0 / 64.0, 1e-9);
}

}  // namespace
}  // namespace vc
