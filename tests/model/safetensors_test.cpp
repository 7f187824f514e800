// Tests of the safetensors reader: well-formed single and sharded checkpoints, and
// each malformed case rejected with a message naming the file and the tensor.
#include "runtime/model/safetensors.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include <nlohmann/json.hpp>

#include "kernels/error.hpp"
#include "tests/model/checkpoint_writer.hpp"

namespace vc {
namespace {

using nlohmann::json;
using testkit::contains_all;
using testkit::error_of;
using testkit::TempDir;
using testkit::write_raw_safetensors;

/// The message SafetensorsFile::open(path) throws, or "".
std::string open_error(const std::filesystem::path& path) {
  return error_of([&] { (void)SafetensorsFile::open(path); });
}

/// A header with two F32 tensors "a" [2] at [0, 8) and "b" [2, 2] at [8, 24).
json two_tensor_header() {
  return {{"__metadata__", {{"format", "pt"}}},
          {"a", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {0, 8}}}},
          {"b", {{"dtype", "F32"}, {"shape", {2, 2}}, {"data_offsets", {8, 24}}}}};
}

/// Sets the process-wide WeightLoad for a scope.
struct WeightLoadScope {
  WeightLoad saved = weight_load();
  explicit WeightLoadScope(WeightLoad how) { set_weight_load(how); }
  ~WeightLoadScope() { set_weight_load(saved); }
};

class safetensors_load : public ::testing::TestWithParam<WeightLoad> {};

TEST_P(safetensors_load, reads_tensors_of_each_float_dtype) {
  const WeightLoadScope scope(GetParam());
  TempDir dir;
  std::mt19937 rng(3);
  std::map<std::string, testkit::TestTensor> tensors = {
      {"w.f32", testkit::random_tensor(DType::f32, {3, 5}, rng)},
      {"w.f16", testkit::random_tensor(DType::f16, {7}, rng)},
      {"w.bf16", testkit::random_tensor(DType::bf16, {2, 2, 3}, rng)},
      {"empty", testkit::random_tensor(DType::f32, {0, 4}, rng)}};
  testkit::write_safetensors(dir / "x.safetensors", tensors);
  const auto f = SafetensorsFile::open(dir / "x.safetensors");
  ASSERT_EQ(f->tensors().size(), 4u);  // __metadata__ is not a tensor
  EXPECT_EQ(f->path(), dir / "x.safetensors");
  for (const auto& [name, t] : tensors) {
    const TensorInfo& info = f->tensors().at(name);
    EXPECT_EQ(info.name, name);
    EXPECT_EQ(std::string(dtype_name(info.dtype)), t.dtype);
    EXPECT_EQ(info.shape, t.shape);
    EXPECT_EQ(info.file, (dir / "x.safetensors").string());
    ASSERT_EQ(info.nbytes, t.bytes.size());
    if (!t.bytes.empty()) {
      EXPECT_EQ(std::memcmp(info.data, t.bytes.data(), t.bytes.size()), 0) << name;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(read_and_mapped, safetensors_load,
                         ::testing::Values(WeightLoad::read, WeightLoad::map),
                         [](const auto& info) {
                           return std::string(info.param == WeightLoad::read ? "read" : "mapped");
                         });

TEST(safetensors, a_file_read_into_memory_keeps_its_bytes_when_the_file_is_rewritten) {
  const WeightLoadScope scope(WeightLoad::read);
  TempDir dir;
  std::mt19937 rng(5);
  const auto path = dir / "x.safetensors";
  std::map<std::string, testkit::TestTensor> first = {
      {"w", testkit::random_tensor(DType::bf16, {64, 64}, rng)}};
  testkit::write_safetensors(path, first);
  const auto f = SafetensorsFile::open(path);
  // Rewritten in place (same size, other bytes): a read copy does not see it.
  std::map<std::string, testkit::TestTensor> second = {
      {"w", testkit::random_tensor(DType::bf16, {64, 64}, rng)}};
  ASSERT_NE(first.at("w").bytes, second.at("w").bytes);
  {
    std::fstream out(path, std::ios::binary | std::ios::in | std::ios::out);
    testkit::write_safetensors(dir / "y.safetensors", second);
    std::ifstream y(dir / "y.safetensors", std::ios::binary);
    out << y.rdbuf();
  }
  const TensorInfo& info = f->tensors().at("w");
  EXPECT_EQ(std::memcmp(info.data, first.at("w").bytes.data(), info.nbytes), 0);
}

TEST(safetensors, a_file_read_into_memory_has_its_tensors_on_cache_lines_whatever_its_header_length) {
  // Tensors at data offsets that are multiples of 64 start on a cache line once read
  // (the data section is placed on a 4 KiB boundary), so a 64-byte load of a weight
  // row touches one line. Headers of every length mod 64 (JSON padded with spaces).
  const WeightLoadScope scope(WeightLoad::read);
  TempDir dir;
  std::vector<uint8_t> data(192);
  for (size_t i = 0; i < data.size(); ++i) data[i] = uint8_t(i * 7 + 1);
  const std::string body = json{{"a", {{"dtype", "F32"}, {"shape", {16}}, {"data_offsets", {0, 64}}}},
                                {"b", {{"dtype", "F32"}, {"shape", {32}}, {"data_offsets", {64, 192}}}}}
                               .dump();
  for (size_t pad = 0; pad < 64; ++pad) {
    std::string name = std::to_string(pad);
    name += ".safetensors";
    const auto path = dir / name;
    write_raw_safetensors(path, body + std::string(pad, ' '), data);
    const auto f = SafetensorsFile::open(path);
    const TensorInfo& a = f->tensors().at("a");
    const TensorInfo& b = f->tensors().at("b");
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data) % 64, 0u) << "header padding " << pad;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data) % 64, 0u) << "header padding " << pad;
    EXPECT_EQ(std::memcmp(a.data, data.data(), 64), 0) << "header padding " << pad;
    EXPECT_EQ(std::memcmp(b.data, data.data() + 64, 128), 0) << "header padding " << pad;
  }
}

TEST(safetensors, rejects_a_truncated_file_naming_it) {
  TempDir dir;
  const auto path = dir / "short.safetensors";
  std::ofstream(path, std::ios::binary) << "abcde";
  EXPECT_TRUE(contains_all(open_error(path), {path.string(), "truncated", "5 bytes"}));

  // Header length says 200 bytes but the file ends sooner.
  write_raw_safetensors(path, two_tensor_header().dump(), std::vector<uint8_t>(24));
  testkit::truncate_file(path, 8 + 20);
  EXPECT_TRUE(contains_all(open_error(path), {path.string(), "truncated", "header length"}));

  // Header intact, data section cut: the offsets no longer fit.
  write_raw_safetensors(path, two_tensor_header().dump(), std::vector<uint8_t>(24));
  testkit::truncate_file(path, std::filesystem::file_size(path) - 4);
  EXPECT_TRUE(contains_all(open_error(path), {path.string(), "'b'", "out of range"}));
}

TEST(safetensors, rejects_a_header_that_is_not_json_naming_the_file) {
  TempDir dir;
  const auto path = dir / "bad.safetensors";
  write_raw_safetensors(path, "{\"a\": {\"dtype\": \"F32\",", std::vector<uint8_t>(8));
  EXPECT_TRUE(contains_all(open_error(path), {path.string(), "header is not valid JSON"}));
}

TEST(safetensors, rejects_a_header_that_is_not_an_object) {
  TempDir dir;
  const auto path = dir / "list.safetensors";
  write_raw_safetensors(path, "[1, 2, 3]", {});
  EXPECT_TRUE(contains_all(open_error(path), {path.string(), "not a JSON object", "array"}));
  write_raw_safetensors(path, R"({"a": 5})", {});
  EXPECT_TRUE(contains_all(open_error(path), {path.string(), "'a'", "not an object"}));
}

TEST(safetensors, rejects_offsets_out_of_range_naming_the_tensor) {
  TempDir dir;
  const auto path = dir / "range.safetensors";
  json h = two_tensor_header();
  h["b"]["data_offsets"] = {8, 32};
  h["b"]["shape"] = {2, 2, 2};
  write_raw_safetensors(path, h.dump(), std::vector<uint8_t>(24));
  EXPECT_TRUE(contains_all(open_error(path),
                           {path.string(), "'b'", "[8, 32]", "out of range", "24 bytes"}));
  h = two_tensor_header();
  h["a"]["data_offsets"] = {8, 0};  // begin after end
  write_raw_safetensors(path, h.dump(), std::vector<uint8_t>(24));
  EXPECT_TRUE(contains_all(open_error(path), {path.string(), "'a'", "out of range"}));
}

TEST(safetensors, rejects_overlapping_offsets_naming_both_tensors) {
  TempDir dir;
  const auto path = dir / "overlap.safetensors";
  json h = two_tensor_header();
  h["b"]["data_offsets"] = {4, 20};
  write_raw_safetensors(path, h.dump(), std::vector<uint8_t>(24));
  EXPECT_TRUE(contains_all(open_error(path), {path.string(), "'a'", "'b'", "overlap"}));
}

TEST(safetensors, rejects_a_size_that_does_not_match_shape_and_dtype) {
  TempDir dir;
  const auto path = dir / "size.safetensors";
  json h = two_tensor_header();
  h["b"]["dtype"] = "BF16";  // [2, 2] of BF16 is 8 bytes, not 16
  write_raw_safetensors(path, h.dump(), std::vector<uint8_t>(24));
  EXPECT_TRUE(contains_all(open_error(path), {path.string(), "'b'", "16 bytes", "[2, 2]", "needs 8"}));
}

TEST(safetensors, rejects_an_unsupported_dtype_naming_tensor_and_dtype) {
  TempDir dir;
  const auto path = dir / "i8.safetensors";
  for (const char* dt : {"I8", "F64", "U8", "BOOL"}) {
    json h = two_tensor_header();
    h["a"]["dtype"] = dt;
    write_raw_safetensors(path, h.dump(), std::vector<uint8_t>(24));
    EXPECT_TRUE(contains_all(open_error(path),
                             {path.string(), "'a'", std::string("'") + dt + "'", "unsupported"}));
  }
}

TEST(safetensors, rejects_entries_missing_fields) {
  TempDir dir;
  const auto path = dir / "fields.safetensors";
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    json h = two_tensor_header();
    h["b"].erase(field);
    write_raw_safetensors(path, h.dump(), std::vector<uint8_t>(24));
    EXPECT_TRUE(contains_all(open_error(path), {path.string(), "'b'", "missing", field}));
  }
  json h = two_tensor_header();
  h["b"]["shape"] = {2, -2};
  write_raw_safetensors(path, h.dump(), std::vector<uint8_t>(24));
  EXPECT_TRUE(contains_all(open_error(path), {path.string(), "'b'", "shape"}));
}

TEST(safetensors, opens_a_missing_file_with_an_error_naming_it) {
  TempDir dir;
  EXPECT_TRUE(contains_all(open_error(dir / "none.safetensors"),
                           {(dir / "none.safetensors").string(), "cannot open"}));
}

TEST(checkpoint, opens_a_sharded_checkpoint_mapping_each_shard_once) {
  const std::string dir = std::string(VC_TEST_DATA_DIR) + "/archs/mistral-sharded-f16";
  const Checkpoint ck = Checkpoint::open(dir);
  EXPECT_EQ(ck.file_count(), 3u);
  EXPECT_EQ(ck.tensor_count(), 3u + 2u * 9u);
  const TensorInfo& v = ck.get("model.layers.0.self_attn.v_proj.weight", DType::f16, {32, 64});
  EXPECT_NE(v.file.find("model-00002-of-00003.safetensors"), std::string::npos);
  EXPECT_EQ(v.nbytes, 32u * 64u * 2u);
  EXPECT_EQ(ck.find("no.such.tensor"), nullptr);
}

TEST(checkpoint, rejects_an_index_naming_a_shard_that_lacks_the_tensor) {
  TempDir dir;
  testkit::FakeModel m = testkit::random_model("MistralForCausalLM", DType::f16);
  m.write(dir.path(), 3);
  json index = testkit::read_json(dir / "model.safetensors.index.json");
  // Point a tensor of the first shard at the third one.
  index["weight_map"]["model.embed_tokens.weight"] = testkit::FakeModel::shard_name(2, 3);
  testkit::write_json(dir / "model.safetensors.index.json", index);
  const std::string msg = error_of([&] { (void)Checkpoint::open(dir.path()); });
  EXPECT_TRUE(contains_all(msg, {"model.safetensors.index.json", "'model.embed_tokens.weight'",
                                 "model-00003-of-00003.safetensors", "does not contain it"}));
}

TEST(checkpoint, rejects_an_index_naming_a_missing_shard_file) {
  TempDir dir;
  testkit::random_model("MistralForCausalLM", DType::bf16).write(dir.path(), 3);
  std::filesystem::remove(dir / testkit::FakeModel::shard_name(1, 3));
  const std::string msg = error_of([&] { (void)Checkpoint::open(dir.path()); });
  EXPECT_TRUE(contains_all(msg, {"model.safetensors.index.json", "model-00002-of-00003.safetensors",
                                 "does not exist", dir.path().string()}));
}

TEST(checkpoint, rejects_an_index_without_a_weight_map) {
  TempDir dir;
  testkit::write_json(dir / "model.safetensors.index.json", {{"metadata", json::object()}});
  EXPECT_TRUE(contains_all(error_of([&] { (void)Checkpoint::open(dir.path()); }),
                           {"model.safetensors.index.json", "weight_map", "missing"}));
  testkit::write_json(dir / "model.safetensors.index.json", {{"weight_map", json::array({1})}});
  EXPECT_TRUE(contains_all(error_of([&] { (void)Checkpoint::open(dir.path()); }),
                           {"model.safetensors.index.json", "'weight_map': expected an object", "found array"}));
}

TEST(checkpoint, rejects_a_directory_without_a_checkpoint_naming_it) {
  TempDir dir;
  EXPECT_TRUE(contains_all(error_of([&] { (void)Checkpoint::open(dir.path()); }),
                           {dir.path().string(), "no model.safetensors"}));
  const auto absent = dir / "absent";
  EXPECT_TRUE(contains_all(error_of([&] { (void)Checkpoint::open(absent); }),
                           {absent.string(), "does not exist"}));
}

TEST(checkpoint, get_reports_a_missing_tensor_naming_it_and_the_directory) {
  const Checkpoint ck = Checkpoint::open(VC_MODEL_DIR);
  EXPECT_EQ(ck.file_count(), 1u);
  EXPECT_TRUE(contains_all(error_of([&] { (void)ck.get("model.layers.9.x.weight", DType::bf16, {1}); }),
                           {"tensor 'model.layers.9.x.weight' not found in", VC_MODEL_DIR}));
}

TEST(checkpoint, get_reports_a_dtype_or_shape_mismatch_naming_tensor_file_and_both) {
  const Checkpoint ck = Checkpoint::open(VC_MODEL_DIR);
  const std::string file = std::string(VC_MODEL_DIR) + "/model.safetensors";
  EXPECT_TRUE(contains_all(
      error_of([&] { (void)ck.get("model.norm.weight", DType::f16, {256}); }),
      {file, "'model.norm.weight'", "expected dtype F16", "found BF16"}));
  EXPECT_TRUE(contains_all(
      error_of([&] { (void)ck.get("model.embed_tokens.weight", DType::bf16, {2048, 128}); }),
      {file, "'model.embed_tokens.weight'", "expected shape [2048, 128]", "found [2048, 256]"}));
  EXPECT_EQ(ck.get("model.norm.weight", DType::bf16, {256}).nbytes, 512u);
}

}  // namespace
}  // namespace vc
