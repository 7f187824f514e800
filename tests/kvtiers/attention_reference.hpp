// Shared by the tests of the drafter's attention over views: normal random data from
// a seed, and attention of one query head in double precision.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <random>
#include <vector>

namespace vc::test {

inline std::vector<float> normal(size_t n, std::mt19937& rng, float sd) {
  std::normal_distribution<float> dist(0.f, sd);
  std::vector<float> x(n);
  for (float& e : x) e = dist(rng);
  return x;
}

/// softmax(scale * q . k_i) . v over rows k, v ([n, d]), in double precision.
inline std::vector<double> reference_attention(const float* q, const std::vector<float>& k,
                                               const std::vector<float>& v, size_t n, size_t d,
                                               float scale) {
  std::vector<double> s(n), out(d, 0.0);
  double mx = -INFINITY, sum = 0;
  for (size_t i = 0; i < n; ++i) {
    double dot = 0;
    for (size_t j = 0; j < d; ++j) dot += double(q[j]) * k[i * d + j];
    mx = std::max(mx, s[i] = dot * scale);
  }
  for (size_t i = 0; i < n; ++i) sum += s[i] = std::exp(s[i] - mx);
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < d; ++j) out[j] += s[i] / sum * v[i * d + j];
  return out;
}

}  // namespace vc::test
