// Constructors of the registered compression methods (one file each in this folder).
#pragma once
#include <memory>

#include "kvtiers/compressor.hpp"

namespace vc {

// Token dropping.
[[nodiscard]] std::unique_ptr<Compressor> make_streaming_llm();
[[nodiscard]] std::unique_ptr<Compressor> make_snapkv();
[[nodiscard]] std::unique_ptr<Compressor> make_h2o();
[[nodiscard]] std::unique_ptr<Compressor> make_expected_attention();
[[nodiscard]] std::unique_ptr<Compressor> make_kvzip();
[[nodiscard]] std::unique_ptr<Compressor> make_kvzap();
[[nodiscard]] std::unique_ptr<Compressor> make_laprox();
// Quantization.
[[nodiscard]] std::unique_ptr<Compressor> make_kivi();
[[nodiscard]] std::unique_ptr<Compressor> make_kvquant();
[[nodiscard]] std::unique_ptr<Compressor> make_rotate_kv();
// Drop with `dropper`, then quantize what is kept with `quantizer`; the ratio is
// split between them (sqrt each by default; parameter "drop_share" in [0, 1]).
[[nodiscard]] std::unique_ptr<Compressor> make_composition(std::unique_ptr<Compressor> dropper,
                                                           std::unique_ptr<Compressor> quantizer);

}  // namespace vc
