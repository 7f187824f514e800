// Attention over quantized rows straight from their codes (dequant_attention.hpp,
// through attention_row_mixed's quant_k / quant_v) against the unfused path the
// drafter ran before: the same prefix decoded a block at a time with
// dequantize_rows into fp32 rows, then attended. Bit for bit, on every SIMD path
// the CPU runs, at every code width 1..16, over the group shapes the codecs use
// (per-channel columns, a few columns, 8/16/32 columns, whole rows, several rows),
// head dims with and without a vector tail, outliers (blended in when their values
// are given, else their blocks decoded), trailing rows that are not quantized
// (decoded, not fused), V alone from the codes with K decoded, and query-head
// groups that leave a partial pass. KVQuant's RoPE'd keys: packed_attention_test.
// KIVI's layout, which the vector paths factor: within float rounding.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/attention_mixed.hpp"
#include "kernels/cpu/dequant.hpp"
#include "kernels/cpu/dequant_attention.hpp"
#include "kernels/dtype.hpp"
#include "tests/error_naming.hpp"
#include "tests/kernels/kernel_test_util.hpp"

namespace vc::cpu {
namespace {

// One side of a head: n rows of d values, rows [0, q) quantized (codes, fp16 zero
// and scale per block, outliers replacing some elements), rows [q, n) plain fp32.
struct Side {
  size_t n = 0, d = 0;
  std::vector<uint8_t> codes;
  std::vector<uint16_t> zero, scale;
  std::vector<uint32_t> outliers;
  std::vector<float> outlier_values, plain;  // outliers: bf16 values
  std::vector<uint16_t> outlier_bf16;
  QuantRows q;

  // The unfused decode: dequantize_rows row by row, then outliers, then plain rows.
  void decode(size_t r0, size_t r1, float* out) const {
    const size_t cb = (d + q.block_cols - 1) / q.block_cols;
    for (size_t r = r0; r < r1; ++r) {
      float* row = out + (r - r0) * d;
      if (r < q.rows) {
        const size_t b = r / q.block_rows * cb;
        dequantize_rows(codes.data(), codes.size(), q.bits, r * d, 1, d, zero.data() + b,
                        scale.data() + b, q.block_cols, 0, row);
      } else {
        std::memcpy(row, plain.data() + (r - q.rows) * d, d * sizeof(float));
      }
    }
    for (size_t i = 0; i < outliers.size(); ++i)
      if (outliers[i] >= r0 * d && outliers[i] < r1 * d) out[outliers[i] - r0 * d] = outlier_values[i];
  }
};

Side make_side(std::mt19937& rng, size_t n, size_t q, size_t d, int bits, size_t br, size_t bc,
               std::vector<uint32_t> outliers) {
  Side s;
  s.n = n;
  s.d = d;
  s.codes.assign((q * d * size_t(bits) + 7) / 8, 0);
  std::uniform_int_distribution<uint32_t> code(0, (1u << bits) - 1u);
  for (size_t i = 0; i < q * d; ++i) {
    const uint32_t c = code(rng);
    for (int b = 0; b < bits; ++b) {
      const size_t at = i * size_t(bits) + size_t(b);
      if ((c >> b) & 1u) s.codes[at / 8] |= uint8_t(1u << (at % 8));
    }
  }
  // Scales spread the codes over about [-1, 1]: attention stays finite.
  std::uniform_real_distribution<float> zero(-1.f, 0.f), scale(0.5f, 2.f);
  const size_t blocks = (q + br - 1) / br * ((d + bc - 1) / bc);
  const float range = float((1u << bits) - 1u);
  for (size_t b = 0; b < blocks; ++b) {
    s.zero.push_back(f32_to_f16(zero(rng)));
    s.scale.push_back(f32_to_f16(scale(rng) / std::max(range, 1.f)));
  }
  s.outliers = std::move(outliers);
  std::normal_distribution<float> val(0.f, 1.f);
  for (size_t i = 0; i < s.outliers.size(); ++i) {
    s.outlier_bf16.push_back(f32_to_bf16(4.f * val(rng)));
    s.outlier_values.push_back(bf16_to_f32(s.outlier_bf16.back()));
  }
  for (size_t i = 0; i < (n - q) * d; ++i) s.plain.push_back(val(rng));
  s.q = QuantRows{s.codes.data(), s.codes.size(), bits,           q,
                  br,             bc,             s.zero.data(),  s.scale.data(),
                  s.outliers.data(), s.outliers.size()};
  return s;
}

struct Head {
  Side k, v;
  size_t decoded_rows = 0;  // rows the callback wrote (the blocks not fused)
  size_t k_only_rows = 0;   // of which only their K rows (V from the codes)
};

void decode_head(const void* ctx, size_t r0, size_t r1, float* k, float* v) {
  auto* h = const_cast<Head*>(static_cast<const Head*>(ctx));
  h->k.decode(r0, r1, k);
  if (v != nullptr) h->v.decode(r0, r1, v);
  h->decoded_rows += r1 - r0;
  if (v == nullptr) h->k_only_rows += r1 - r0;
}

// Which sides attention_row_mixed is told it may read from the codes, and whether
// their outliers' values come along (QuantRows::outlier_values).
struct Fuse {
  bool k = false, v = false, outlier_values = false;
};

// attention_row_mixed over the heads' prefixes (and a short fp32 tail), fusing the
// sides asked for; returns the output and adds the rows decoded to `decoded` (and
// those decoded for K only to `k_only`).
std::vector<float> attend(std::vector<Head>& heads, size_t n_heads, size_t d, Fuse fuse,
                          const std::vector<float>& q, size_t& decoded,
                          ThreadPool* pool = nullptr, size_t* k_only = nullptr) {
  const size_t kvh = heads.size(), n = heads[0].k.n, tail_rows = 3, bt = 4;
  const size_t n_ctx = n + tail_rows, blocks = (n_ctx + bt - 1) / bt;
  std::vector<int32_t> table(blocks);
  std::iota(table.begin(), table.end(), 0);
  std::mt19937 rng(3);
  const std::vector<float> tk = test::random_floats(rng, blocks * kvh * bt * d);
  const std::vector<float> tv = test::random_floats(rng, tk.size());
  const PagedKv tail{tk.data(), tv.data(), DType::f32, bt, kvh, d, table.data()};
  std::vector<DenseKvHead> prefix;
  for (Head& h : heads) {
    h.decoded_rows = h.k_only_rows = 0;
    for (Side* side : {&h.k, &h.v})
      side->q.outlier_values = fuse.outlier_values ? side->outlier_bf16.data() : nullptr;
    prefix.push_back({nullptr, nullptr, n, DType::f32, &decode_head, &h,
                      fuse.k ? &h.k.q : nullptr, fuse.v ? &h.v.q : nullptr});
  }
  std::vector<float> out(n_heads * d, NAN);
  attention_row_mixed(q.data(), n_heads, prefix.data(), tail, n, n_ctx, 0.125f, out.data(), pool);
  for (const Head& h : heads) {
    decoded += h.decoded_rows;
    if (k_only != nullptr) *k_only += h.k_only_rows;
  }
  return out;
}

struct Shape {
  size_t br, bc;
};

void expect_same_bits(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_TRUE(std::isfinite(a[i])) << what << ", element " << i;
    uint32_t x, y;
    std::memcpy(&x, &a[i], 4);
    std::memcpy(&y, &b[i], 4);
    ASSERT_EQ(x, y) << what << ", element " << i << ": " << a[i] << " vs " << b[i];
  }
}

TEST(dequant_attention, fused_blocks_give_the_bits_of_decoded_blocks_on_every_simd_path) {
  constexpr size_t B = kMixedBlockRows;
  const size_t n = 4 * B + 5, q = 3 * B + 9;  // a block with trailing plain rows, a partial one
  test::for_each_simd_path([&](SimdPath path) {
    std::mt19937 rng(7);
    for (size_t d : {size_t(64), size_t(40), size_t(20)}) {
      const Shape shapes[] = {{256, 1}, {B, 1}, {5, 3}, {1, 8}, {1, 16}, {1, 32},
                              {1, d},   {4, d}, {3, 7}, {1, 2 * d}};
      for (int bits = 1; bits <= 16; ++bits) {
        for (const Shape& sh : shapes) {
          const size_t br = std::min(sh.br, q);
          for (size_t n_heads : {size_t(4), size_t(6)}) {  // 2 or 3 query heads per KV head
            std::vector<Head> heads;
            // KV head 0: an outlier in block 1 (keys) and block 2 (values); head 1 none.
            heads.push_back({make_side(rng, n, q, d, bits, br, sh.bc, {uint32_t(B * d + 3)}),
                             make_side(rng, n, q, d, bits, br, sh.bc, {uint32_t(2 * B * d + d - 1)})});
            heads.push_back({make_side(rng, n, q, d, bits, br, sh.bc, {}),
                             make_side(rng, n, q, d, bits, br, sh.bc, {})});
            const std::vector<float> qv = test::random_floats(rng, n_heads * d, -2.f, 2.f);
            const std::string what = std::string(simd_path_name(path)) + ", d " +
                                     std::to_string(d) + ", " + std::to_string(bits) +
                                     " bits, blocks " + std::to_string(br) + "x" +
                                     std::to_string(sh.bc) + ", heads " + std::to_string(n_heads);
            size_t unfused_rows = 0, fused_rows = 0, patched_rows = 0, v_rows = 0, k_only = 0;
            const auto want = attend(heads, n_heads, d, {}, qv, unfused_rows);
            const auto got = attend(heads, n_heads, d, {true, true, false}, qv, fused_rows);
            expect_same_bits(got, want, what);
            // Unfused: every row of the 4 whole blocks and the 5-row rest, per KV head.
            ASSERT_EQ(unfused_rows, 2 * n) << what;
            // Fused: head 0 decodes blocks 1 and 2 (outliers), both heads block 3
            // (rows past q) and the rest; every other block came from the codes.
            ASSERT_EQ(fused_rows, (2 * B + B + 5) + (B + 5)) << what;
            // With the outliers' values, their blocks come from the codes too.
            const auto patched = attend(heads, n_heads, d, {true, true, true}, qv, patched_rows);
            expect_same_bits(patched, want, what + ", outliers blended");
            ASSERT_EQ(patched_rows, 2 * (B + 5)) << what;
            // V alone from the codes: each whole quantized block decodes its K rows only.
            const auto v_only =
                attend(heads, n_heads, d, {false, true, true}, qv, v_rows, nullptr, &k_only);
            expect_same_bits(v_only, want, what + ", V alone from the codes");
            ASSERT_EQ(k_only, 2 * 3 * B) << what;
            ASSERT_EQ(v_rows, 2 * n) << what;
          }
        }
      }
    }
  });
}

// KIVI's layout (keys with a zero and scale per column over groups of rows, values
// per groups of a row's columns), which the vector paths attend with the
// dequantization factored out (factored_attention_kernel.hpp): the decoded blocks'
// result up to float rounding, whatever the group rows (dividing the block,
// straddling it, a few columns expanded), value groups (a vector, two, a row,
// several rows), head dims (with a vector tail: dequantized instead), code widths
// and query-head passes; the scalar path keeps the bits.
TEST(dequant_attention, kivi_blocks_match_the_decoded_blocks_within_float_rounding_on_every_simd_path) {
  constexpr size_t B = kMixedBlockRows;
  const size_t n = 4 * B + 5, q = 3 * B + 9;
  test::for_each_simd_path([&](SimdPath path) {
    std::mt19937 rng(17);
    for (size_t d : {size_t(64), size_t(128), size_t(40)}) {
      const Shape k_shapes[] = {{32, 1}, {B, 1}, {24, 1}, {5, 3}};
      const Shape v_shapes[] = {{1, 16}, {1, 32}, {1, d}, {2, d}};
      for (int bits : {1, 3, 4, 8}) {
        for (const Shape& ks : k_shapes) {
          for (const Shape& vs : v_shapes) {
            for (size_t n_heads : {size_t(4), size_t(6)}) {
              std::vector<Head> heads;
              for (int g = 0; g < 2; ++g)
                heads.push_back({make_side(rng, n, q, d, bits, ks.br, ks.bc, {}),
                                 make_side(rng, n, q, d, bits, vs.br, vs.bc, {})});
              const std::vector<float> qv = test::random_floats(rng, n_heads * d, -2.f, 2.f);
              const std::string what = std::string(simd_path_name(path)) + ", d " +
                                       std::to_string(d) + ", " + std::to_string(bits) +
                                       " bits, K " + std::to_string(ks.br) + "x" +
                                       std::to_string(ks.bc) + ", V " + std::to_string(vs.br) +
                                       "x" + std::to_string(vs.bc) + ", heads " +
                                       std::to_string(n_heads);
              size_t unfused_rows = 0, fused_rows = 0;
              const auto want = attend(heads, n_heads, d, {}, qv, unfused_rows);
              const auto got = attend(heads, n_heads, d, {true, true, false}, qv, fused_rows);
              // Every whole quantized block came from the codes.
              ASSERT_EQ(fused_rows, 2 * (B + 5)) << what;
              if (path == SimdPath::scalar) {
                expect_same_bits(got, want, what);
                continue;
              }
              for (size_t i = 0; i < want.size(); ++i)
                ASSERT_NEAR(got[i], want[i], 2e-6f * (1.f + std::fabs(want[i])))
                    << what << ", element " << i;
            }
          }
        }
      }
    }
  });
}

TEST(dequant_attention, a_lone_row_split_across_a_pool_gives_the_bits_of_one_thread) {
  // Long enough for the split (kMinParallelPositions), four KV heads, fused and
  // decoded blocks (an outlier in head 2), 4-bit KIVI-like groups.
  constexpr size_t B = kMixedBlockRows;
  const size_t n = 40 * B + 5, q = 38 * B + 3, d = 64, n_heads = 16;
  static_assert(40 * B + 5 >= kMinParallelPositions);
  ThreadPool pool(3);
  test::for_each_simd_path([&](SimdPath) {
    std::mt19937 rng(9);
    std::vector<Head> heads;
    for (size_t g = 0; g < 4; ++g) {
      std::vector<uint32_t> outliers;
      if (g == 2) outliers.push_back(uint32_t(5 * B * d + 7));
      heads.push_back({make_side(rng, n, q, d, 4, 32, 1, outliers), make_side(rng, n, q, d, 4, 1, 32, {})});
    }
    const std::vector<float> qv = test::random_floats(rng, n_heads * d, -2.f, 2.f);
    for (bool fuse : {false, true}) {
      size_t one_rows = 0, pool_rows = 0;
      const Fuse how{fuse, fuse, fuse};
      const auto one = attend(heads, n_heads, d, how, qv, one_rows);
      const auto split = attend(heads, n_heads, d, how, qv, pool_rows, &pool);
      expect_same_bits(split, one, fuse ? "fused" : "decoded");
      EXPECT_EQ(one_rows, pool_rows);
    }
  });
}

TEST(dequant_attention, quant_rows_plain_holds_only_for_quantized_rows_without_outliers) {
  const std::vector<uint8_t> codes(64);
  const std::vector<uint16_t> params(8);
  const std::vector<uint32_t> outliers = {70, 200};
  const QuantRows q{codes.data(), codes.size(), 4,  16, 4, 8, params.data(), params.data(),
                    outliers.data(), outliers.size()};
  const size_t d = 8;
  EXPECT_TRUE(quant_rows_plain(q, d, 0, 8));     // elements [0, 64)
  EXPECT_FALSE(quant_rows_plain(q, d, 8, 9));    // element 70
  EXPECT_TRUE(quant_rows_plain(q, d, 9, 16));    // [72, 128)
  EXPECT_FALSE(quant_rows_plain(q, d, 12, 17));  // past the 16 quantized rows
  EXPECT_FALSE(quant_rows_plain(q, d, 4, 4));    // no rows
  EXPECT_FALSE(quant_rows_plain(QuantRows{}, d, 0, 1));
}

TEST(dequant_attention, readable_rows_may_hold_outliers_with_values_and_roped_rows_need_whole_halves) {
  const std::vector<uint8_t> codes(1024);
  const std::vector<uint16_t> params(64), values = {0x3f80, 0x4000};
  const std::vector<uint32_t> outliers = {70, 200};
  const std::vector<int32_t> positions(32, 7);
  const std::vector<float> inv_freq(16, 0.5f);
  QuantRows q{codes.data(), codes.size(), 4,  16, 4, 8, params.data(), params.data(),
              outliers.data(), outliers.size()};
  EXPECT_FALSE(quant_rows_readable(q, 8, 8, 9));  // an outlier without its value
  q.outlier_values = values.data();
  EXPECT_TRUE(quant_rows_readable(q, 8, 8, 9));
  EXPECT_FALSE(quant_rows_readable(q, 8, 12, 17));  // past the quantized rows
  q.rope_inv_freq = inv_freq.data();
  EXPECT_FALSE(quant_rows_readable(q, 8, 0, 4));  // RoPE without positions
  q.rope_positions = positions.data();
  EXPECT_FALSE(quant_rows_readable(q, 8, 0, 4));  // halves of 4: not whole vectors
  q.rows = 8;
  EXPECT_TRUE(quant_rows_readable(q, 32, 0, 8));
}

TEST(dequant_attention, bad_blocks_are_refused_with_an_error_naming_them) {
  const float q[16] = {};
  const std::vector<float> rows(2 * 4 * 8);
  const int32_t table[1] = {0};
  const PagedKv one{rows.data(), rows.data(), DType::f32, 4, 1, 8, table};
  const std::vector<uint8_t> codes(16), few(4);  // 32 codes of 4 bits; 8
  const float zeros[16] = {}, *zr[4] = {zeros, zeros, zeros, zeros};
  const QuantSideBlock ok{codes.data(), codes.size(), 4, 0, zr, zr, false, 1};
  QuantSideBlock short_codes = ok, bad_bits = ok, no_scales = ok;
  short_codes.codes_bytes = few.size();
  bad_bits.bits = 17;
  no_scales.scale = nullptr;
  AttentionRowState s;
  s.begin(q, 1, one, 4, 1.f);
  test::expect_error_naming([&] { s.add_quantized(short_codes, ok); }, "run past");
  test::expect_error_naming([&] { s.add_quantized(ok, bad_bits); }, "bits must be in 1..16");
  test::expect_error_naming([&] { s.add_quantized(no_scales, ok); }, "no codes, zeros or scales");
  const PagedKv two{rows.data(), rows.data(), DType::f32, 4, 2, 8, table};
  s.begin(q, 2, two, 4, 1.f);
  test::expect_error_naming([&] { s.add_quantized(ok, ok); }, "one KV head");
  s.begin(q, 1, one, 4, 1.f);
  test::expect_error_naming([&] { s.add_quantized_v(nullptr, ok); }, "no K rows");
  const float* cs[4] = {};
  QuantSideBlock roped = ok;
  roped.rope = cs;
  test::expect_error_naming([&] { s.add_quantized_v(rows.data(), roped); }, "K rows only");
  test::expect_error_naming([&] { s.add_quantized(roped, ok); }, "multiple of 32");
  s.add_quantized(ok, ok);
  test::expect_error_naming([&] { s.add_quantized(ok, ok); }, "already added");
  test::expect_error_naming([&] { s.add_quantized_v(rows.data(), ok); }, "already added");
}

}  // namespace
}  // namespace vc::cpu
