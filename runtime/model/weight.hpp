// One weight tensor of a checkpoint, as the forward pass and the backends see it.
#pragma once
#include <cstddef>

#include "kernels/dtype.hpp"

namespace vc {

/// A weight matrix [rows, cols] row-major (or a vector: rows = 1), not owned.
struct Weight {
  const void* data = nullptr;
  DType dtype = DType::bf16;
  size_t rows = 0;
  size_t cols = 0;
  [[nodiscard]] bool present() const { return data != nullptr; }
};

}  // namespace vc
