// attend_view_row (kvtiers/view_attention.hpp), the drafter's attention of one row
// over a compressed view and the request's tail, against a double-precision softmax
// over the rows the view decodes to and the tail's rows: RotateKV's heads attended
// in their rotated basis (queries, tail rows and output rotated instead of every
// kept row; whole blocks from the codes, the last partial block decoded without the
// rotation), a RotateKV view with bf16 keys (only values rotated: decoded per block),
// KIVI's from the codes, at two ratios, with and without a tail; and split across a
// pool, bit for bit the single-thread result.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/thread_pool.hpp"
#include "kvtiers/compressed_tier.hpp"
#include "kvtiers/layer_compression.hpp"
#include "kvtiers/view_attention.hpp"
#include "tests/kernels/kernel_test_util.hpp"
#include "tests/kvtiers/attention_reference.hpp"

namespace vc {
namespace {

constexpr size_t kKvHeads = 2, kHeads = 8, kDim = 64, kPos = 700, kBlock = 8;

using test::normal;

std::vector<double> reference(const float* q, const std::vector<float>& k,
                              const std::vector<float>& v, size_t n, float scale) {
  return test::reference_attention(q, k, v, n, kDim, scale);
}

TEST(view_attention, rotated_heads_are_attended_in_their_basis_within_float_rounding_of_the_rows) {
  std::mt19937 rng(21);
  KvSnapshot kv{1, kKvHeads, kDim, kPos, normal(kKvHeads * kPos * kDim, rng, 1.f),
                normal(kKvHeads * kPos * kDim, rng, 0.5f)};
  for (size_t i = 5; i < kv.k.size(); i += kDim) kv.k[i] *= 8.0f;  // an outlier channel
  ModelFacts model;
  model.heads = kHeads;
  for (size_t i = 0; i < kDim / 2; ++i)
    model.rope_inv_freq.push_back(float(std::pow(10000.0, -2.0 * double(i) / double(kDim))));
  for (size_t p = 0; p < kPos; ++p) model.positions.push_back(int32_t(p));
  struct Format {
    const char* name;
    double ratio;
    int key_bits;  // 0: the codec's choice
    bool rotated;
  };
  const Format formats[] = {{"rotate_kv", 4.0, 0, true},
                            {"rotate_kv", 8.0, 0, true},
                            {"rotate_kv", 4.0, 16, false},  // bf16 keys: decoded per block
                            {"kivi", 4.0, 0, false}};
  const float scale = 1.f / std::sqrt(float(kDim));
  const size_t blocks = (kPos + 5 + kBlock - 1) / kBlock;
  std::vector<int32_t> table(blocks);
  std::iota(table.rbegin(), table.rend(), 0);
  const std::vector<float> tk = normal(blocks * kKvHeads * kBlock * kDim, rng, 1.f);
  const std::vector<float> tv = normal(tk.size(), rng, 0.5f);
  const cpu::PagedKv tail{tk.data(), tv.data(), DType::f32, kBlock, kKvHeads, kDim, table.data()};
  cpu::ThreadPool pool(2);
  for (const Format& f : formats) {
    auto c = make_compressor(f.name);
    if (f.key_bits != 0) c->set_param("key_bits", f.key_bits);
    const CompressedView view =
        CompressedView::build(kv, plan_snapshot(*c, kv, {}, model, f.ratio), *c, model);
    const std::string what = std::string(f.name) + " " + std::to_string(f.ratio) + "x k" +
                             std::to_string(f.key_bits);
    for (size_t g = 0; g < kKvHeads; ++g) ASSERT_EQ(view.hadamard_basis(0, g), f.rotated) << what;
    test::for_each_simd_path([&](cpu::SimdPath) {
      const std::vector<float> q = normal(kHeads * kDim, rng, 1.f);
      for (size_t tail_rows : {size_t(0), size_t(5)}) {
        std::vector<float> out(kHeads * kDim, NAN), split(kHeads * kDim, NAN);
        attend_view_row(view, 0, q.data(), kHeads, tail, kPos + tail_rows, scale, out.data());
        attend_view_row(view, 0, q.data(), kHeads, tail, kPos + tail_rows, scale, split.data(),
                        &pool);
        ASSERT_EQ(0, std::memcmp(out.data(), split.data(), out.size() * sizeof(float)))
            << what << ": the pool's split changed the bits";
        for (size_t h = 0; h < kHeads; ++h) {
          const size_t g = h / (kHeads / kKvHeads), n = view.count(0, g);
          std::vector<float> k(n * kDim), v(n * kDim);
          view.decode(0, g, k.data(), v.data());
          for (size_t pos = kPos; pos < kPos + tail_rows; ++pos) {
            const size_t at = ((size_t(table[pos / kBlock]) * kKvHeads + g) * kBlock + pos % kBlock) * kDim;
            k.insert(k.end(), tk.begin() + long(at), tk.begin() + long(at + kDim));
            v.insert(v.end(), tv.begin() + long(at), tv.begin() + long(at + kDim));
          }
          const std::vector<double> want = reference(&q[h * kDim], k, v, n + tail_rows, scale);
          for (size_t j = 0; j < kDim; ++j)
            ASSERT_NEAR(out[h * kDim + j], want[j], 2e-5)
                << what << ", head " << h << " dim " << j << ", tail " << tail_rows;
        }
      }
    });
  }
}

}  // namespace
}  // namespace vc
