// OpenAI-style error bodies (api_error.hpp).
#include "tools/server/api_error.hpp"

namespace vc::server {

// In OpenAI's key order: message, type, param, code.
nlohmann::ordered_json ApiError::body() const {
  using json = nlohmann::ordered_json;
  return {{"error",
           {{"message", what()},
            {"type", type_},
            {"param", param_.empty() ? json(nullptr) : json(param_)},
            {"code", code_.empty() ? json(nullptr) : json(code_)}}}};
}

ApiError bad_request(const std::string& param, const std::string& message) {
  return ApiError(400, "invalid_request_error", message, param);
}

}  // namespace vc::server
