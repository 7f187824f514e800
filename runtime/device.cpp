// Device names.
#include "runtime/device.hpp"

#include <charconv>

#include "kernels/error.hpp"

namespace vc {

std::string Device::str() const {
  return kind == Kind::cpu ? std::string("cpu") : "cuda:" + std::to_string(index);
}

Device parse_device(std::string_view text) {
  const auto bad = [&] {
    return Error("device: expected cpu, cuda or cuda:N (N a device number), got '" +
                 std::string(text) + "'");
  };
  if (text == "cpu") return {};
  if (text == "cuda") return {Device::Kind::cuda, 0};
  constexpr std::string_view prefix = "cuda:";
  if (!text.starts_with(prefix)) throw bad();
  const std::string_view n = text.substr(prefix.size());
  int index = -1;
  const auto [end, ec] = std::from_chars(n.data(), n.data() + n.size(), index);
  if (n.empty() || ec != std::errc() || end != n.data() + n.size() || index < 0) throw bad();
  return {Device::Kind::cuda, index};
}

}  // namespace vc
