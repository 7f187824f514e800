// Fuzzes the tokenizer. The first byte picks what the rest is:
//   even: a tokenizer.json, loaded with Tokenizer::from_file; an accepted one then
//         encodes a fixed text and decodes ids across (and past) its vocabulary.
//   odd:  arbitrary bytes, encoded with the bundled tokenizer (models/tinycode), then
//         decoded: the text must come back byte for byte (byte-level BPE is
//         lossless); ids made of the bytes are decoded too.
// Only vc::Error may come out of loading; encoding and decoding must not throw.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/error.hpp"
#include "runtime/model/tokenizer.hpp"
#include "tests/fuzz/fuzz_support.hpp"

namespace {

std::vector<int32_t> ids_of(std::string_view bytes) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i + 2 <= bytes.size(); i += 2)
    ids.push_back(int32_t(uint16_t(uint8_t(bytes[i]) | uint8_t(bytes[i + 1]) << 8)) - 8);
  return ids;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view rest = vc::fuzz::as_text(data + 1, size - 1);
  if ((data[0] & 1) == 0) {
    try {
      const vc::Tokenizer tok = vc::Tokenizer::from_file(vc::fuzz::write_file("tokenizer.json", rest));
      const std::vector<int32_t> ids = tok.encode("<|begin_of_text|>def f(x):\n\treturn x ü 日本 ▁a\xff");
      (void)tok.decode(ids);
      std::vector<int32_t> all;
      for (int32_t i = -2; i < tok.vocab_size() + 2 && i < 4096; ++i) all.push_back(i);
      (void)tok.decode(all, false);
      (void)tok.decode(all, true);
    } catch (const vc::Error&) {
    }
    return 0;
  }
  static const vc::Tokenizer tok =
      vc::Tokenizer::from_file(std::string(VC_MODEL_DIR) + "/tokenizer.json");
  const std::vector<int32_t> ids = tok.encode(rest);
  const std::string back = tok.decode(ids);
  if (back != rest) {
    std::fprintf(stderr, "decode(encode(text)) differs: %zu bytes in, %zu out\n", rest.size(),
                 back.size());
    std::abort();
  }
  (void)tok.decode(ids_of(rest), true);
  return 0;
}
