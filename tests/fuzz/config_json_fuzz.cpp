// Fuzzes config.json loading (load_model_config: bounded read, depth-checked parse,
// validation), then the values derived from an accepted config. Only vc::Error may
// come out.
#include <cstdint>

#include "kernels/error.hpp"
#include "runtime/model/config.hpp"
#include "tests/fuzz/fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const vc::ModelConfig c =
        vc::load_model_config(vc::fuzz::write_file("config.json", vc::fuzz::as_text(data, size)));
    volatile int64_t sink = int64_t(c.q_dim()) + c.kv_dim();
    if (c.head_dim <= 4096) sink = sink + int64_t(c.rope_inv_freq().size());
  } catch (const vc::Error&) {
  }
  return 0;
}
