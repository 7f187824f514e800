// Fuzzes one `vericache batch` input line through the steps batch_cmd.cpp takes:
// depth-checked parse, the "id" check, request_from_json, then validate_request
// with the bundled model's limits and tokenizer. Only vc::Error (FieldError
// included) may come out.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "kernels/error.hpp"
#include "runtime/model/bounded_input.hpp"
#include "runtime/model/config.hpp"
#include "runtime/model/tokenizer.hpp"
#include "runtime/request_validation.hpp"
#include "tests/fuzz/fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const vc::Tokenizer tok =
      vc::Tokenizer::from_file(std::string(VC_MODEL_DIR) + "/tokenizer.json");
  static const vc::RequestLimits limits =
      vc::RequestLimits::of(vc::load_model_config(std::string(VC_MODEL_DIR) + "/config.json"));
  try {
    const nlohmann::json j =
        vc::parse_json_bounded(vc::fuzz::as_text(data, size), "", {size_t(16) << 20, 64});
    if (j.is_object() && j.contains("id")) {
      const nlohmann::json& id = j["id"];
      if (!id.is_string() && !id.is_number())
        throw vc::FieldError("id", "expected a string or a number");
    }
    const vc::RequestInput in = vc::request_from_json(j, {"id"});
    const vc::ValidRequest v = vc::validate_request(in, limits, &tok);
    volatile size_t sink = v.prompt_ids.size();
    (void)sink;
  } catch (const vc::Error&) {
  }
  return 0;
}
