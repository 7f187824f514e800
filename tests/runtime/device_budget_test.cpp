// The fast-memory budget of a model on a GPU when none is given
// (runtime/device_budget.hpp): the utilized share of the device's memory less what
// is in use once the weights are on it; nothing left, a utilization out of range or
// a device that cannot tell its memory are errors naming it.
#include "runtime/device_budget.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "kernels/error.hpp"
#include "runtime/device.hpp"

namespace vc {
namespace {

constexpr size_t kGiB = size_t(1) << 30;

std::string error_of(const DeviceMemory& m, double u) {
  try {
    (void)device_kv_budget(m, u, "cuda:3");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(device_budget, the_budget_is_half_the_utilized_share_of_the_device_less_what_is_in_use) {
  // 80 GiB device, 20 GiB in use (weights, other processes): 90% leaves 52 GiB, of
  // which half is the budget (the other half for the device's copies growing).
  EXPECT_EQ(device_kv_budget({60 * kGiB, 80 * kGiB}, 0.9, "cuda:0"),
            (size_t(std::floor(0.9 * double(80 * kGiB))) - 20 * kGiB) / 2);
  EXPECT_EQ(device_kv_budget({60 * kGiB, 80 * kGiB}, 1.0, "cuda:0"), 30 * kGiB);
  // More in use, less budget, half a byte for each byte.
  EXPECT_EQ(device_kv_budget({60 * kGiB, 80 * kGiB}, 0.5, "cuda:0") - device_kv_budget({58 * kGiB, 80 * kGiB}, 0.5, "cuda:0"),
            kGiB);
}

TEST(device_budget, while_the_host_keeps_its_own_copy_the_budget_is_at_most_half_its_available_memory) {
  EXPECT_EQ(device_kv_budget({60 * kGiB, 80 * kGiB}, 1.0, "cuda:0", 40 * kGiB), 20 * kGiB);
  EXPECT_EQ(device_kv_budget({60 * kGiB, 80 * kGiB}, 1.0, "cuda:0", 200 * kGiB), 30 * kGiB);
  EXPECT_EQ(device_kv_budget({60 * kGiB, 80 * kGiB}, 1.0, "cuda:0", 0), 30 * kGiB) << "0: not known";
  const size_t host = host_available_memory();
  EXPECT_GT(host, size_t(64) << 20) << "this machine's MemAvailable";
}

TEST(device_budget, a_device_already_past_its_share_is_an_error_naming_it_and_the_figures) {
  const std::string e = error_of({5 * kGiB, 80 * kGiB}, 0.9);  // 75 GiB in use > 72 allowed
  EXPECT_NE(e.find("cuda:3"), std::string::npos) << e;
  EXPECT_NE(e.find("no memory left"), std::string::npos) << e;
  EXPECT_NE(e.find("75.00 GiB"), std::string::npos) << e;
  EXPECT_NE(e.find("fast-memory budget"), std::string::npos) << e;
  EXPECT_NE(error_of({8 * kGiB, 80 * kGiB}, 0.9), "") << "exactly the share in use leaves nothing";
}

TEST(device_budget, a_utilization_outside_zero_to_one_is_an_error) {
  for (const double u : {0.0, -0.5, 1.0001, 2.0, std::numeric_limits<double>::quiet_NaN(),
                         std::numeric_limits<double>::infinity()}) {
    const std::string e = error_of({60 * kGiB, 80 * kGiB}, u);
    EXPECT_NE(e.find("utilization"), std::string::npos) << u << ": " << e;
  }
}

TEST(device_budget, a_device_that_cannot_tell_its_memory_is_an_error_naming_it) {
  for (const DeviceMemory m : {DeviceMemory{0, 0}, DeviceMemory{81 * kGiB, 80 * kGiB}}) {
    const std::string e = error_of(m, 0.9);
    EXPECT_NE(e.find("cuda:3"), std::string::npos) << e;
    EXPECT_NE(e.find("cannot tell"), std::string::npos) << e;
  }
}

TEST(device_budget, reading_a_devices_memory_names_it_when_it_cannot) {
  // Here (no GPU, or no CUDA in this build) an error naming cuda:0; on a GPU, its
  // figures, which the budget then takes.
  try {
    const DeviceMemory m = cuda_memory(0);
    EXPECT_GT(m.total, 0u);
    EXPECT_LE(m.free, m.total);
    EXPECT_GT(device_kv_budget(m, 1.0, "cuda:0"), 0u);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace vc
