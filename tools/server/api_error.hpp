// An error as OpenAI clients expect it: an HTTP status and a JSON body
// {"error": {"message", "type", "param", "code"}}. Everything the server refuses or
// fails at ends in one of these; the HTTP layer only writes it out.
#pragma once
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace vc::server {

class ApiError : public std::runtime_error {
 public:
  /// `type` as OpenAI names it (invalid_request_error, authentication_error, ...);
  /// `param` the offending request field ("" = none); `code` a short machine code.
  ApiError(int status, std::string type, std::string message, std::string param = "",
           std::string code = "")
      : std::runtime_error(message), status_(status), type_(std::move(type)),
        param_(std::move(param)), code_(std::move(code)) {}
  [[nodiscard]] int status() const { return status_; }
  [[nodiscard]] const std::string& type() const { return type_; }
  [[nodiscard]] const std::string& param() const { return param_; }
  [[nodiscard]] const std::string& code() const { return code_; }
  /// {"error": {...}}; param and code are null when empty.
  [[nodiscard]] nlohmann::ordered_json body() const;

 private:
  int status_;
  std::string type_, param_, code_;
};

/// 400 invalid_request_error naming `param`.
[[nodiscard]] ApiError bad_request(const std::string& param, const std::string& message);

}  // namespace vc::server
