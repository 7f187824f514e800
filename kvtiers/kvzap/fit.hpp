// Fitting KVzap's surrogate of one layer to (hidden state, target score) pairs:
// closed-form ridge regression for the linear form, a small seeded trainer (Adam on
// mean squared error, minibatches in a seeded order) for the mlp form, and R^2 to
// report how much of the targets' variance a fit explains. Everything runs in a
// fixed order, so the same data and seed give the same bits.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kvtiers/kvzap/surrogate.hpp"

namespace vc {

/// Training pairs of one layer: x [rows][dim], y [rows][outputs].
struct KvzapSamples {
  size_t rows = 0, dim = 0, outputs = 0;
  std::vector<float> x, y;
};

/// Ridge regression with an unpenalised intercept: minimises
/// mean ||W x + b - y||^2 + lambda ||W||^2 over the samples (centred normal
/// equations, Cholesky in double). Throws vc::Error on empty or mis-sized samples.
[[nodiscard]] KvzapLayer fit_ridge(const KvzapSamples& s, double lambda = 1e-3);

/// Settings of the mlp trainer.
struct MlpTraining {
  size_t units = 64;     // hidden units
  size_t epochs = 30;    // passes over the samples
  size_t batch = 64;     // rows per Adam step
  double lr = 2e-3;      // Adam step size
  uint64_t seed = 1;     // initial weights and the order of the rows
};

/// Trains W2 gelu(W1 x + b1) + b2 on the samples (inputs standardised per channel
/// inside, folded back into W1 and b1 at the end; W1 initialised uniform in
/// +-1/sqrt(dim) from the seed, W2 likewise over units, b2 at the targets' mean).
[[nodiscard]] KvzapLayer train_mlp(const KvzapSamples& s, const MlpTraining& t);

/// The layer's predictions for every sample row: [rows][outputs].
[[nodiscard]] std::vector<float> predict(const KvzapSurrogate& m, size_t layer,
                                         const KvzapSamples& s);

/// Coefficient of determination of `pred` against s.y, averaged over the outputs
/// (1 - residual / total sum of squares per output; an output with no variance
/// counts as 1 when predicted exactly, else 0).
[[nodiscard]] double r_squared(const KvzapSamples& s, const std::vector<float>& pred);

}  // namespace vc
