// Attention weights summed over query rows, for prefill statistics (accumulated
// attention, H2O-style): each row's scores become softmax weights, and the weights
// of every row are added up per key position.
#pragma once
#include <cstddef>

#include "kernels/cpu/thread_pool.hpp"

namespace vc::cpu {

/// For each row i < rows: w_i = softmax(scale * s[i, 0..len[i])) (len[i] <= ncols,
/// entries past len[i] ignored); then acc[t] += sum over i of w_i[t], for t < ncols.
/// s: [rows, ncols] fp32 dot products, overwritten (with unnormalised weights);
/// acc: [ncols]. Each weight is exp(...) times 1 / its row's sum, rounded, then added.
/// exp is the float polynomial of exp_approx.hpp (vectorised per instruction set);
/// each acc[t] sums its rows in row order, so the result does not depend on `pool`
/// (which may be nullptr) or the thread count.
void softmax_accumulate(float* s, size_t rows, size_t ncols, const size_t* len, float scale,
                        float* acc, ThreadPool* pool);

}  // namespace vc::cpu
