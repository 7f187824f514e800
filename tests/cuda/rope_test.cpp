// Tests of the CUDA RoPE against vc::cpu::rope, with plain and Llama-3-scaled
// frequencies (the formula of ModelConfig::rope_inv_freq) and Qwen3's per-head
// q/k norm before it (launch_rms_norm over rows of head_dim, as runtime/forward.cpp
// calls cpu::rms_norm). Skipped where no CUDA device is usable.
#include "kernels/cuda/rope.cuh"

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/cpu/elementwise.hpp"
#include "kernels/cuda/rms_norm.cuh"
#include "tests/cuda/cuda_test_support.hpp"

namespace vc::cuda {
namespace {

using test::DeviceBuffer;

// The inverse frequencies ModelConfig::rope_inv_freq() computes (the CPU forward's;
// runtime/model/config.cpp), written out here so these tests need only the kernels:
// theta^(-2i/head_dim), and with Llama-3 scaling (factor 8, low 1, high 4, original
// context 8192) the low frequencies divided by 8 and the band between smoothed.
std::vector<float> rope_inv_freq(int head_dim, bool llama3) {
  const double theta = llama3 ? 500000.0 : 10000.0;
  const double factor = 8.0, low = 1.0, high = 4.0, old_len = 8192.0;
  const double pi = 3.14159265358979323846;
  std::vector<float> out(size_t(head_dim / 2));
  for (int i = 0; i < head_dim / 2; ++i) {
    double inv = 1.0 / std::pow(theta, double(2 * i) / double(head_dim));
    if (llama3) {
      const double wavelen = 2.0 * pi / inv;
      if (wavelen > old_len / low) {
        inv /= factor;
      } else if (wavelen >= old_len / high) {
        const double smooth = (old_len / wavelen - low) / (high - low);
        inv = (1.0 - smooth) * inv / factor + smooth * inv;
      }
    }
    out[size_t(i)] = float(inv);
  }
  return out;
}

std::vector<int32_t> positions(std::mt19937& rng, size_t M) {
  std::vector<int32_t> pos(M);
  for (size_t m = 0; m < M; ++m) pos[m] = m % 3 == 0 ? int32_t(m) : int32_t(rng() % 200000);
  return pos;
}

// The device's double sin/cos may round to a different float than the host's in a
// rare last-bit case; each such element is then off by about |x| * 2^-24.
void expect_close_and_mostly_identical(const std::vector<float>& got, const std::vector<float>& ref,
                                       const char* what) {
  size_t identical = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    identical += got[i] == ref[i];
    ASSERT_NEAR(got[i], ref[i], 1e-6 + 1e-6 * std::fabs(ref[i])) << what << " i=" << i;
  }
  EXPECT_GE(double(identical), 0.99 * double(ref.size())) << what;
}

TEST(cuda_rope, matches_the_cpu_rope_with_and_without_llama3_scaling) {
  VC_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(71);
  for (bool llama3 : {false, true}) {
    for (int hd : {2, 64, 80, 128, 256}) {
      const size_t M = 9, nh = 5;
      const std::vector<float> inv = rope_inv_freq(hd, llama3);
      const auto pos = positions(rng, M);
      const auto x = test::random_floats(rng, M * nh * size_t(hd), -2.f, 2.f);
      std::vector<float> ref = x;
      cpu::rope(ref.data(), M, nh, size_t(hd), pos.data(), inv.data());

      DeviceBuffer<float> dx(x), dinv(inv);
      DeviceBuffer<int32_t> dpos(pos);
      CUDA_CHECK(launch_rope(dx.get(), M, nh, size_t(hd), dpos.get(), dinv.get(), nullptr));
      CUDA_CHECK(cudaDeviceSynchronize());
      const std::string what =
          std::string("llama3=") + (llama3 ? "1" : "0") + " head_dim=" + std::to_string(hd);
      expect_close_and_mostly_identical(dx.download(), ref, what.c_str());
    }
  }
}

TEST(cuda_rope, applies_qwen3_qk_norm_then_rope_like_the_cpu_forward) {
  VC_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(72);
  const size_t M = 6, nh = 16, nkv = 4, hd = 128;
  const float eps = 1e-6f;
  const std::vector<float> inv = rope_inv_freq(int(hd), false);
  const auto pos = positions(rng, M);
  for (size_t heads : {nh, nkv}) {
    const auto x = test::random_floats(rng, M * heads * hd, -3.f, 3.f);
    const auto w = test::random_typed(rng, hd, DType::bf16, 0.5f, 1.5f);  // as loaded
    std::vector<float> ref = x;
    cpu::rms_norm(ref.data(), M * heads, hd, w.data(), DType::bf16, eps, ref.data());
    cpu::rope(ref.data(), M, heads, hd, pos.data(), inv.data());

    DeviceBuffer<float> dx(x), dinv(inv);
    DeviceBuffer<uint8_t> dw(w);
    DeviceBuffer<int32_t> dpos(pos);
    CUDA_CHECK(
        launch_rms_norm(dx.get(), M * heads, hd, dw.get(), DType::bf16, eps, dx.get(), nullptr));
    CUDA_CHECK(launch_rope(dx.get(), M, heads, hd, dpos.get(), dinv.get(), nullptr));
    CUDA_CHECK(cudaDeviceSynchronize());
    const auto got = dx.download();
    // RMSNorm's sum of squares is an f32 tree on the GPU, double on the CPU.
    for (size_t i = 0; i < ref.size(); ++i)
      ASSERT_NEAR(got[i], ref[i], 1e-5 + 1e-5 * std::fabs(ref[i]))
          << "heads=" << heads << " i=" << i;
  }
}

TEST(cuda_rope, gives_a_row_the_same_bits_alone_or_in_a_batch) {
  VC_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(73);
  const size_t M = 33, nh = 8, hd = 128;
  const std::vector<float> inv = rope_inv_freq(int(hd), true);
  const auto pos = positions(rng, M);
  const auto x = test::random_floats(rng, M * nh * hd, -2.f, 2.f);
  DeviceBuffer<float> dx(x), dinv(inv);
  DeviceBuffer<int32_t> dpos(pos);
  CUDA_CHECK(launch_rope(dx.get(), M, nh, hd, dpos.get(), dinv.get(), nullptr));
  CUDA_CHECK(cudaDeviceSynchronize());
  const auto batch = dx.download();
  for (size_t m = 0; m < M; m += 7) {
    const std::vector<float> row(x.begin() + m * nh * hd, x.begin() + (m + 1) * nh * hd);
    DeviceBuffer<float> drow(row);
    DeviceBuffer<int32_t> dp(std::vector<int32_t>{pos[m]});
    CUDA_CHECK(launch_rope(drow.get(), 1, nh, hd, dp.get(), dinv.get(), nullptr));
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> want(batch.begin() + m * nh * hd, batch.begin() + (m + 1) * nh * hd);
    EXPECT_TRUE(test::same_bits(drow.download(), want)) << "row " << m;
  }
}

}  // namespace
}  // namespace vc::cuda
