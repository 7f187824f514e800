// The CUDA drafter attention over quantized prefixes (QuantPrefixSide: codes
// dequantized inside the kernel) against vc::cpu::attention_row_mixed over the same
// prefixes decoded on the CPU the way the compressed tier decodes them: KIVI-like
// sides (per-channel keys, per-token values, bf16 residual rows), KVQuant-like ones
// (outliers, keys RoPE'd at their positions), RotateKV-like ones (Hadamard), and a
// plain bf16 prefix in the same launch. Skipped where no CUDA device is usable.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "kernels/cpu/attention_mixed.hpp"
#include "kernels/cpu/dequant.hpp"
#include "kernels/cpu/row_transforms.hpp"
#include "kernels/cuda/attention_mixed.cuh"
#include "kernels/dtype.hpp"
#include "tests/cuda/cuda_test_support.hpp"

namespace vc::cuda {
namespace {

using test::DeviceBuffer;

constexpr size_t D = 64;

enum class Transform { none, rope, hadamard };

// One side of a prefix of n rows as the compressed tier holds it (host), with the
// fp32 rows its decode gives.
struct HostSide {
  size_t n = 0, q = 0;
  int bits = 0;
  size_t br = 1, bc = 1;
  std::vector<uint8_t> codes;
  std::vector<uint16_t> zero, scale, full, outlier_values;
  std::vector<uint32_t> outliers;
  Transform transform = Transform::none;
  std::vector<float> decoded;  // [n][D]
};

HostSide make_side(std::mt19937& rng, size_t n, size_t q, int bits, size_t br, size_t bc,
                   size_t n_outliers, Transform transform, const std::vector<int32_t>& positions,
                   const float* rope_table) {
  HostSide s;
  s.n = n, s.q = q, s.bits = bits, s.br = br, s.bc = bc, s.transform = transform;
  s.codes.assign((q * D * size_t(bits) + 7) / 8, 0);
  std::vector<uint32_t> codes(q * D);
  std::uniform_int_distribution<uint32_t> code(0, (1u << bits) - 1u);
  for (size_t i = 0; i < q * D; ++i) {
    codes[i] = code(rng);
    for (int b = 0; b < bits; ++b) {
      const size_t at = i * size_t(bits) + size_t(b);
      if ((codes[i] >> b) & 1u) s.codes[at / 8] |= uint8_t(1u << (at % 8));
    }
  }
  std::uniform_real_distribution<float> zero(-1.f, 0.f), scale(0.5f, 2.f);
  const size_t col_blocks = (D + bc - 1) / bc, blocks = (q + br - 1) / br * col_blocks;
  for (size_t b = 0; b < blocks; ++b) {
    s.zero.push_back(f32_to_f16(zero(rng)));
    s.scale.push_back(f32_to_f16(scale(rng) / float((1u << bits) - 1u)));
  }
  std::normal_distribution<float> val(0.f, 1.f);
  for (size_t i = 0; i < (n - q) * D; ++i) s.full.push_back(f32_to_bf16(val(rng)));
  std::set<uint32_t> picked;
  std::uniform_int_distribution<uint32_t> where(0, uint32_t(n * D - 1));
  while (picked.size() < n_outliers) picked.insert(where(rng));
  for (uint32_t i : picked) {
    s.outliers.push_back(i);
    s.outlier_values.push_back(f32_to_bf16(4.f * val(rng)));
  }
  // The CPU decode: zero + code * scale (unfused), bf16 rows, outliers, transform.
  s.decoded.assign(n * D, 0.f);
  for (size_t r = 0; r < q; ++r)
    for (size_t c = 0; c < D; ++c) {
      const size_t b = r / br * col_blocks + c / bc;
      const float z = f16_to_f32(s.zero[b]), sc = f16_to_f32(s.scale[b]);
      const float prod = float(codes[r * D + c]) * sc;
      s.decoded[r * D + c] = z + prod;
    }
  for (size_t i = 0; i < (n - q) * D; ++i) s.decoded[q * D + i] = bf16_to_f32(s.full[i]);
  for (size_t i = 0; i < s.outliers.size(); ++i)
    s.decoded[s.outliers[i]] = bf16_to_f32(s.outlier_values[i]);
  for (size_t r = 0; r < n; ++r) {
    float* row = s.decoded.data() + r * D;
    if (transform == Transform::rope) cpu::rope_row(row, D, rope_table + size_t(positions[r]) * D, 1.f);
    if (transform == Transform::hadamard) cpu::hadamard_rows(row, 1, D);
  }
  return s;
}

// A side's device copies and its descriptor.
struct DeviceSide {
  std::unique_ptr<DeviceBuffer<uint8_t>> codes;
  std::unique_ptr<DeviceBuffer<uint16_t>> zero, scale, full, outlier_values;
  std::unique_ptr<DeviceBuffer<uint32_t>> outliers;
  QuantPrefixSide desc;
};

DeviceSide upload(const HostSide& s, const int32_t* positions, const float* rope_table) {
  DeviceSide d;
  d.codes = std::make_unique<DeviceBuffer<uint8_t>>(s.codes);
  d.zero = std::make_unique<DeviceBuffer<uint16_t>>(s.zero);
  d.scale = std::make_unique<DeviceBuffer<uint16_t>>(s.scale);
  d.full = std::make_unique<DeviceBuffer<uint16_t>>(s.full);
  d.outliers = std::make_unique<DeviceBuffer<uint32_t>>(s.outliers);
  d.outlier_values = std::make_unique<DeviceBuffer<uint16_t>>(s.outlier_values);
  d.desc = {d.codes->get(),      s.codes.size(),      s.bits,
            s.q,                 s.br,                s.bc,
            d.zero->get(),       d.scale->get(),      d.full->get(),
            d.outliers->get(),   d.outlier_values->get(), s.outliers.size(),
            s.transform == Transform::rope ? positions : nullptr,
            s.transform == Transform::rope ? rope_table : nullptr,
            s.transform == Transform::hadamard};
  return d;
}

TEST(cuda_attention_mixed, reads_quantized_prefixes_from_their_codes_as_the_cpu_decodes_them) {
  VC_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(211);
  const size_t n_heads = 8, kvh = 4, bt = 16, blocks = 8, M = 2, qd = n_heads * D;
  const DType dt = DType::bf16;
  const int32_t tail_begin = 700, n_ctx = 700 + 37;  // the view covers below tail_begin
  const size_t n = 600;                               // kept prefix rows per head
  std::vector<int32_t> positions(n);                  // ascending, below tail_begin
  for (size_t i = 0; i < n; ++i) positions[i] = int32_t(i + i / 6);
  std::vector<float> inv(D / 2);
  for (size_t i = 0; i < D / 2; ++i) inv[i] = float(std::pow(10000.0, -2.0 * double(i) / double(D)));
  const float* table = cpu::rope_table(inv.data(), D / 2, size_t(tail_begin));
  const std::vector<float> rope(table, table + size_t(tail_begin + 1) * D);
  DeviceBuffer<int32_t> dpos(positions);
  DeviceBuffer<float> drope(rope);

  // Per (row, head): head 0 KIVI-like, 1 KVQuant-like, 2 RotateKV-like, 3 plain bf16.
  std::vector<HostSide> hk, hv;
  std::vector<std::vector<uint8_t>> plain_k, plain_v;
  for (size_t m = 0; m < M; ++m) {
    hk.push_back(make_side(rng, n, n - 40, 2, 32, 1, 0, Transform::none, positions, table));
    hv.push_back(make_side(rng, n, n - 40, 2, 1, D, 0, Transform::none, positions, table));
    hk.push_back(make_side(rng, n, n, 4, n, 1, n * D / 100, Transform::rope, positions, table));
    hv.push_back(make_side(rng, n, n, 4, 1, D, n * D / 100, Transform::none, positions, table));
    hk.push_back(make_side(rng, n, n, 3, 1, 32, 0, Transform::hadamard, positions, table));
    hv.push_back(make_side(rng, n, n, 3, 1, 32, 0, Transform::hadamard, positions, table));
    hk.push_back(HostSide{});
    hv.push_back(HostSide{});
    plain_k.push_back(test::random_typed(rng, n * D, dt, -1.f, 1.f));
    plain_v.push_back(test::random_typed(rng, n * D, dt, -1.f, 1.f));
  }
  std::vector<DeviceSide> dk, dv;
  std::vector<QuantPrefixSide> qk, qv;
  for (size_t i = 0; i < hk.size(); ++i) {
    if (hk[i].n == 0) {  // the plain head: no codes
      dk.emplace_back();
      dv.emplace_back();
    } else {
      dk.push_back(upload(hk[i], dpos.get(), drope.get()));
      dv.push_back(upload(hv[i], dpos.get(), drope.get()));
    }
    qk.push_back(dk.back().desc);
    qv.push_back(dv.back().desc);
  }
  std::vector<std::unique_ptr<DeviceBuffer<uint8_t>>> dplain;
  std::vector<const void*> kptr, vptr;
  for (size_t m = 0; m < M; ++m)
    for (size_t g = 0; g < kvh; ++g) {
      const bool plain = g == 3;
      dplain.push_back(std::make_unique<DeviceBuffer<uint8_t>>(plain ? plain_k[m] : std::vector<uint8_t>(1)));
      kptr.push_back(dplain.back()->get());
      dplain.push_back(std::make_unique<DeviceBuffer<uint8_t>>(plain ? plain_v[m] : std::vector<uint8_t>(1)));
      vptr.push_back(dplain.back()->get());
    }
  const auto kpool = test::random_typed(rng, blocks * kvh * bt * D, dt, -1.f, 1.f);
  const auto vpool = test::random_typed(rng, blocks * kvh * bt * D, dt, -1.f, 1.f);
  std::vector<int32_t> order(64, 0);  // tail blocks 43..46 of each row -> pool blocks
  for (size_t i = 0; i < 4; ++i) order[size_t(tail_begin) / bt + i] = int32_t(blocks - 1 - i);
  std::vector<int32_t> tables;
  for (size_t m = 0; m < M; ++m) tables.insert(tables.end(), order.begin(), order.end());
  const auto q = test::random_floats(rng, M * qd, -1.f, 1.f);
  const float scale = 0.125f;

  DeviceBuffer<QuantPrefixSide> dqk(qk), dqv(qv);
  DeviceBuffer<const void*> dkptr(kptr), dvptr(vptr);
  DeviceBuffer<int32_t> dcounts(std::vector<int32_t>(M * kvh, int32_t(n)));
  DeviceBuffer<int32_t> dbegin(std::vector<int32_t>(M, tail_begin)), dctx(std::vector<int32_t>(M, n_ctx));
  DeviceBuffer<int32_t> dtables(tables);
  DeviceBuffer<uint8_t> dkpool(kpool), dvpool(vpool);
  DeviceBuffer<float> dq(q), dout(M * qd);
  MixedKvRows kv;
  kv.prefix_k = dkptr.get();
  kv.prefix_v = dvptr.get();
  kv.prefix_count = dcounts.get();
  kv.k = dkpool.get();
  kv.v = dvpool.get();
  kv.dtype = dt;
  kv.block_tokens = bt;
  kv.kv_heads = kvh;
  kv.head_dim = D;
  kv.block_tables = dtables.get();
  kv.table_stride = order.size();
  kv.tail_begin = dbegin.get();
  kv.n_ctx = dctx.get();
  kv.max_entries = n + size_t(n_ctx - tail_begin);
  kv.prefix_quant_k = dqk.get();
  kv.prefix_quant_v = dqv.get();
  const size_t ws = attention_mixed_workspace_floats(M, n_heads, D, kv.max_entries);
  DeviceBuffer<float> dws(ws);
  CUDA_CHECK(launch_attention_rows_mixed(dq.get(), M, n_heads, kv, scale, dout.get(), dws.get(), ws,
                                         nullptr));
  CUDA_CHECK(cudaDeviceSynchronize());
  const auto got = dout.download();

  for (size_t m = 0; m < M; ++m) {
    std::vector<std::vector<float>> fk(kvh), fv(kvh);
    std::vector<cpu::DenseKvHead> prefix(kvh);
    for (size_t g = 0; g < kvh; ++g) {
      const size_t i = m * kvh + g;
      if (g == 3) {
        fk[g].resize(n * D);
        fv[g].resize(n * D);
        to_f32(dt, plain_k[m].data(), fk[g].data(), n * D);
        to_f32(dt, plain_v[m].data(), fv[g].data(), n * D);
      } else {
        fk[g] = hk[i].decoded;
        fv[g] = hv[i].decoded;
      }
      prefix[g] = {fk[g].data(), fv[g].data(), n};
    }
    const cpu::PagedKv tail{kpool.data(), vpool.data(), dt, bt, kvh, D, order.data()};
    std::vector<float> ref(qd);
    cpu::attention_row_mixed(q.data() + m * qd, n_heads, prefix.data(), tail, size_t(tail_begin),
                             size_t(n_ctx), scale, ref.data());
    for (size_t i = 0; i < qd; ++i)
      ASSERT_NEAR(got[m * qd + i], ref[i], 2e-5 + 2e-5 * std::fabs(ref[i]))
          << "row " << m << " KV head " << i / D / (n_heads / kvh) << " i=" << i;
  }
}

}  // namespace
}  // namespace vc::cuda
