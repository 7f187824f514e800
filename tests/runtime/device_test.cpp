// Where the weight products run: --device names, Model::on_device on the CPU and
// with no usable GPU (tests/runtime/cuda_device_test.cpp runs it on one).
#include <gtest/gtest.h>

#include "kernels/error.hpp"
#include "runtime/device.hpp"
#include "runtime/linear_backend.hpp"
#include "runtime/tp_comm.hpp"
#include "tests/runtime/test_support.hpp"

namespace vc {
namespace {

TEST(device, cpu_cuda_and_cuda_n_name_a_device) {
  EXPECT_EQ(parse_device("cpu"), Device{});
  EXPECT_EQ(parse_device("cuda"), (Device{Device::Kind::cuda, 0}));
  EXPECT_EQ(parse_device("cuda:3"), (Device{Device::Kind::cuda, 3}));
  EXPECT_EQ(parse_device("cuda:3").str(), "cuda:3");
  EXPECT_EQ(parse_device("cpu").str(), "cpu");
  EXPECT_TRUE(parse_device("cpu").is_cpu());
  EXPECT_FALSE(parse_device("cuda").is_cpu());
}

TEST(device, any_other_name_is_an_error_quoting_it) {
  for (const char* bad : {"", "gpu", "CUDA", "cuda:", "cuda:-1", "cuda:1x", "cuda:0:1", "cpu:0"}) {
    try {
      (void)parse_device(bad);
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("'" + std::string(bad) + "'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("cuda:N"), std::string::npos) << e.what();
    }
  }
}

TEST(device, on_the_cpu_a_model_stays_itself) {
  const auto m = test::tinycode();
  EXPECT_EQ(Model::on_device(m, Device{}), m);
  EXPECT_TRUE(m->device().is_cpu());
  EXPECT_EQ(m->linear_backend(), nullptr);
}

TEST(device, without_a_usable_gpu_placing_a_model_on_cuda_is_an_error_naming_the_device) {
  std::shared_ptr<const Model> placed;
  try {
    placed = Model::on_device(test::tinycode(), parse_device("cuda:0"));
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cuda:0"), std::string::npos) << what;
    // Either this build has no CUDA, or the runtime said why there is no device.
    EXPECT_TRUE(what.find("no usable CUDA device (cuda") != std::string::npos ||
                what.find("this build has no CUDA") != std::string::npos)
        << what;
    return;
  }
  GTEST_SKIP() << "this machine has a usable GPU (" << placed->linear_backend()->description()
               << "): tests/runtime/cuda_device_test.cpp runs there";
}

TEST(device, a_device_number_past_the_machines_gpus_is_an_error) {
  // With no GPU the count is 0; with some, 99 is past them.
  try {
    (void)Model::on_device(test::tinycode(), parse_device("cuda:99"));
    ADD_FAILURE() << "cuda:99 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:99"), std::string::npos) << e.what();
  }
}

TEST(device, a_tensor_parallel_shard_is_not_placed_on_a_gpu) {
  const auto shard = Model::shard(test::tinycode(), 0, std::make_shared<CpuCommunicator>(2));
  try {
    (void)Model::on_device(shard, parse_device("cuda:0"));
    ADD_FAILURE() << "a shard was placed on cuda:0";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor-parallel"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace vc
