// Ridge regression and the seeded mlp trainer of KVzap's surrogate (see fit.hpp).
#include "kvtiers/kvzap/fit.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/error.hpp"

namespace vc {
namespace {

void check_samples(const KvzapSamples& s, const char* who) {
  if (s.rows == 0 || s.dim == 0 || s.outputs == 0)
    throw Error(std::string(who) + ": no samples (rows, dim and outputs must be positive)");
  if (s.x.size() != s.rows * s.dim || s.y.size() != s.rows * s.outputs)
    throw Error(std::string(who) + ": samples hold " + std::to_string(s.x.size()) + " inputs and " +
                std::to_string(s.y.size()) + " targets for " + std::to_string(s.rows) +
                " rows of (" + std::to_string(s.dim) + ", " + std::to_string(s.outputs) + ")");
}

// splitmix64: a small generator whose sequence is fixed by the seed on every platform.
struct Rng {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return double(next() >> 11) * 0x1.0p-53; }  // [0, 1)
};

double gelu(double v) { return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))); }
double gelu_grad(double v) {
  constexpr double kInvSqrt2Pi = 0.3989422804014327;
  return 0.5 * (1.0 + std::erf(v / std::sqrt(2.0))) + v * kInvSqrt2Pi * std::exp(-0.5 * v * v);
}

// Adam on one parameter vector.
struct Adam {
  std::vector<double> m, v;
  explicit Adam(size_t n) : m(n, 0.0), v(n, 0.0) {}
  void step(std::vector<double>& p, const std::vector<double>& g, double lr, size_t t) {
    constexpr double b1 = 0.9, b2 = 0.999, eps = 1e-8;
    const double c1 = 1.0 - std::pow(b1, double(t)), c2 = 1.0 - std::pow(b2, double(t));
    for (size_t i = 0; i < p.size(); ++i) {
      m[i] = b1 * m[i] + (1 - b1) * g[i];
      v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
      p[i] -= lr * (m[i] / c1) / (std::sqrt(v[i] / c2) + eps);
    }
  }
};

}  // namespace

KvzapLayer fit_ridge(const KvzapSamples& s, double lambda) {
  check_samples(s, "fit_ridge");
  if (!(lambda >= 0) || !std::isfinite(lambda))
    throw Error("fit_ridge: lambda must be a finite number >= 0");
  const size_t n = s.rows, d = s.dim, G = s.outputs;
  std::vector<double> mx(d, 0.0), my(G, 0.0);
  for (size_t r = 0; r < n; ++r) {
    for (size_t i = 0; i < d; ++i) mx[i] += s.x[r * d + i];
    for (size_t g = 0; g < G; ++g) my[g] += s.y[r * G + g];
  }
  for (double& v : mx) v /= double(n);
  for (double& v : my) v /= double(n);
  // A = Xc^T Xc / n + lambda I, B = Xc^T Yc / n.
  std::vector<double> A(d * d, 0.0), B(d * G, 0.0), xc(d);
  for (size_t r = 0; r < n; ++r) {
    for (size_t i = 0; i < d; ++i) xc[i] = s.x[r * d + i] - mx[i];
    for (size_t i = 0; i < d; ++i) {
      const double xi = xc[i];
      double* Ai = &A[i * d];
      for (size_t j = 0; j <= i; ++j) Ai[j] += xi * xc[j];
      for (size_t g = 0; g < G; ++g) B[i * G + g] += xi * (s.y[r * G + g] - my[g]);
    }
  }
  for (size_t i = 0; i < d; ++i) {
    for (size_t j = 0; j <= i; ++j) A[i * d + j] /= double(n);
    A[i * d + i] += lambda;
    for (size_t g = 0; g < G; ++g) B[i * G + g] /= double(n);
  }
  // Cholesky A = L L^T (lower triangle in place); a tiny ridge keeps it definite.
  for (size_t j = 0; j < d; ++j) {
    double diag = A[j * d + j];
    for (size_t k = 0; k < j; ++k) diag -= A[j * d + k] * A[j * d + k];
    if (!(diag > 0)) diag = 1e-12;
    const double ljj = std::sqrt(diag);
    A[j * d + j] = ljj;
    for (size_t i = j + 1; i < d; ++i) {
      double v = A[i * d + j];
      for (size_t k = 0; k < j; ++k) v -= A[i * d + k] * A[j * d + k];
      A[i * d + j] = v / ljj;
    }
  }
  KvzapLayer out;
  out.w1.assign(G * d, 0.f);
  out.b1.assign(G, 0.f);
  std::vector<double> z(d);
  for (size_t g = 0; g < G; ++g) {
    for (size_t i = 0; i < d; ++i) {  // L z = b
      double v = B[i * G + g];
      for (size_t k = 0; k < i; ++k) v -= A[i * d + k] * z[k];
      z[i] = v / A[i * d + i];
    }
    for (size_t i = d; i-- > 0;) {  // L^T w = z
      double v = z[i];
      for (size_t k = i + 1; k < d; ++k) v -= A[k * d + i] * z[k];
      z[i] = v / A[i * d + i];
    }
    double b = my[g];
    for (size_t i = 0; i < d; ++i) {
      out.w1[g * d + i] = float(z[i]);
      b -= z[i] * mx[i];
    }
    out.b1[g] = float(b);
  }
  const auto finite = [](float v) { return std::isfinite(v); };
  if (!std::all_of(out.w1.begin(), out.w1.end(), finite) || !std::all_of(out.b1.begin(), out.b1.end(), finite))
    throw Error("fit_ridge: the fit is not finite: " + std::to_string(n) + " samples of " + std::to_string(d) +
                " inputs leave the system singular at lambda " + std::to_string(lambda) +
                " (a larger lambda, --lambda, or more text fixes it)");
  return out;
}

KvzapLayer train_mlp(const KvzapSamples& s, const MlpTraining& t) {
  check_samples(s, "train_mlp");
  if (t.units == 0 || t.batch == 0 || !(t.lr > 0))
    throw Error("train_mlp: units, batch and lr must be positive");
  const size_t n = s.rows, d = s.dim, G = s.outputs, U = t.units;
  // Per-channel standardisation of the inputs.
  std::vector<double> mu(d, 0.0), sd(d, 0.0);
  for (size_t r = 0; r < n; ++r)
    for (size_t i = 0; i < d; ++i) mu[i] += s.x[r * d + i];
  for (double& v : mu) v /= double(n);
  for (size_t r = 0; r < n; ++r)
    for (size_t i = 0; i < d; ++i) sd[i] += (s.x[r * d + i] - mu[i]) * (s.x[r * d + i] - mu[i]);
  for (double& v : sd) v = std::sqrt(v / double(n)) + 1e-6;
  std::vector<double> xs(n * d);
  for (size_t r = 0; r < n; ++r)
    for (size_t i = 0; i < d; ++i) xs[r * d + i] = (s.x[r * d + i] - mu[i]) / sd[i];

  Rng rng{t.seed};
  std::vector<double> w1(U * d), b1(U, 0.0), w2(G * U), b2(G, 0.0);
  const double a1 = 1.0 / std::sqrt(double(d)), a2 = 1.0 / std::sqrt(double(U));
  for (double& w : w1) w = (2 * rng.uniform() - 1) * a1;
  for (double& w : w2) w = (2 * rng.uniform() - 1) * a2;
  for (size_t r = 0; r < n; ++r)
    for (size_t g = 0; g < G; ++g) b2[g] += s.y[r * G + g] / double(n);

  Adam o_w1(w1.size()), o_b1(b1.size()), o_w2(w2.size()), o_b2(b2.size());
  std::vector<double> g_w1(w1.size()), g_b1(U), g_w2(w2.size()), g_b2(G);
  std::vector<double> pre(U), act(U), dact(U);
  std::vector<size_t> order(n);
  for (size_t r = 0; r < n; ++r) order[r] = r;
  size_t step = 0;
  for (size_t e = 0; e < t.epochs; ++e) {
    for (size_t i = n; i > 1; --i) std::swap(order[i - 1], order[rng.next() % i]);  // Fisher-Yates
    for (size_t b0 = 0; b0 < n; b0 += t.batch) {
      const size_t bn = std::min(t.batch, n - b0);
      std::fill(g_w1.begin(), g_w1.end(), 0.0);
      std::fill(g_b1.begin(), g_b1.end(), 0.0);
      std::fill(g_w2.begin(), g_w2.end(), 0.0);
      std::fill(g_b2.begin(), g_b2.end(), 0.0);
      for (size_t k = 0; k < bn; ++k) {
        const size_t r = order[b0 + k];
        const double* x = &xs[r * d];
        for (size_t u = 0; u < U; ++u) {
          double v = b1[u];
          const double* wr = &w1[u * d];
          for (size_t i = 0; i < d; ++i) v += wr[i] * x[i];
          pre[u] = v;
          act[u] = gelu(v);
        }
        std::fill(dact.begin(), dact.end(), 0.0);
        for (size_t g = 0; g < G; ++g) {
          double yhat = b2[g];
          for (size_t u = 0; u < U; ++u) yhat += w2[g * U + u] * act[u];
          const double err = 2.0 * (yhat - s.y[r * G + g]) / double(bn * G);
          g_b2[g] += err;
          for (size_t u = 0; u < U; ++u) {
            g_w2[g * U + u] += err * act[u];
            dact[u] += err * w2[g * U + u];
          }
        }
        for (size_t u = 0; u < U; ++u) {
          const double dp = dact[u] * gelu_grad(pre[u]);
          g_b1[u] += dp;
          double* gw = &g_w1[u * d];
          for (size_t i = 0; i < d; ++i) gw[i] += dp * x[i];
        }
      }
      ++step;
      o_w1.step(w1, g_w1, t.lr, step);
      o_b1.step(b1, g_b1, t.lr, step);
      o_w2.step(w2, g_w2, t.lr, step);
      o_b2.step(b2, g_b2, t.lr, step);
    }
  }
  // Fold the standardisation into the first layer: w' = w / sd, b' = b - w' . mu.
  KvzapLayer out;
  out.w1.resize(U * d);
  out.b1.resize(U);
  for (size_t u = 0; u < U; ++u) {
    double b = b1[u];
    for (size_t i = 0; i < d; ++i) {
      const double w = w1[u * d + i] / sd[i];
      out.w1[u * d + i] = float(w);
      b -= w * mu[i];
    }
    out.b1[u] = float(b);
  }
  out.w2.assign(w2.begin(), w2.end());
  out.b2.assign(b2.begin(), b2.end());
  return out;
}

std::vector<float> predict(const KvzapSurrogate& m, size_t layer, const KvzapSamples& s) {
  std::vector<float> out(s.rows * m.kv_heads);
  m.score(layer, s.x.data(), s.rows, s.dim, out.data());
  return out;
}

double r_squared(const KvzapSamples& s, const std::vector<float>& pred) {
  check_samples(s, "r_squared");
  if (pred.size() != s.y.size()) throw Error("r_squared: predictions and targets differ in size");
  const size_t n = s.rows, G = s.outputs;
  double total = 0;
  for (size_t g = 0; g < G; ++g) {
    double mean = 0;
    for (size_t r = 0; r < n; ++r) mean += s.y[r * G + g];
    mean /= double(n);
    double ss_res = 0, ss_tot = 0;
    for (size_t r = 0; r < n; ++r) {
      const double y = s.y[r * G + g];
      ss_res += (y - pred[r * G + g]) * (y - pred[r * G + g]);
      ss_tot += (y - mean) * (y - mean);
    }
    total += ss_tot > 0 ? 1.0 - ss_res / ss_tot : (ss_res == 0 ? 1.0 : 0.0);
  }
  return total / double(G);
}

}  // namespace vc
