// `vericache model random|scale` as a library: generated checkpoints load, random
// weights follow the seed, and the bundled model padded to a larger shape decodes
// the bundled model's tokens.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "kernels/error.hpp"
#include "runtime/forward.hpp"
#include "runtime/model/random_model.hpp"
#include "runtime/model/scaled_model.hpp"
#include "runtime/sampler.hpp"
#include "test_support.hpp"
#include "tests/kernels/kernel_test_util.hpp"

namespace {

namespace fs = std::filesystem;

const fs::path kShapesDir = fs::path(VC_MODEL_DIR).parent_path().parent_path() / "configs" / "shapes";

// A fresh directory under the temp dir, removed with everything in it.
class ScratchDir {
 public:
  ScratchDir() {
    std::string t = (fs::temp_directory_path() / "vc_gen_XXXXXX").string();
    if (::mkdtemp(t.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = t;
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  fs::path operator/(const std::string& n) const { return path_ / n; }

 private:
  fs::path path_;
};

std::string file_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

vc::ModelShape shape_from(const std::string& name, const nlohmann::json& fields, const fs::path& dir) {
  std::ofstream(dir / (name + ".json")) << fields.dump(2);
  return vc::load_shape((dir / (name + ".json")).string(), kShapesDir);
}

// Greedy decoding of `steps` tokens after `prompt`; the logits of every step, and
// with `forced` the tokens fed are forced's (teacher forcing), not the model's own.
struct Decoded {
  std::vector<int32_t> ids;
  std::vector<std::vector<float>> logits;
};

Decoded greedy(const vc::Model& m, const std::vector<int32_t>& prompt, size_t steps, vc::DType kv,
               const std::vector<int32_t>* forced = nullptr) {
  vc::PagedKvCache cache(m.kv_config(prompt.size() + steps + 16, kv));
  vc::Workspace ws(1);
  vc::KvSequence seq;
  Decoded d;
  std::vector<float> logits = vc::prefill(m, prompt, seq, cache, ws);
  for (size_t i = 0; i < steps; ++i) {
    d.logits.push_back(logits);
    d.ids.push_back(vc::argmax(logits));
    const int32_t next = forced ? (*forced)[i] : d.ids.back();
    cache.reserve(seq, seq.length + 1);
    const vc::ForwardRow row{next, int32_t(seq.length), &seq, true};
    vc::forward(m, std::span(&row, 1), cache, ws, logits);
  }
  return d;
}

std::vector<std::vector<int32_t>> prompts(size_t n, size_t max_len) {
  std::vector<std::vector<int32_t>> out;
  for (const auto& c : vc::test::golden()["cases"]) {
    std::vector<int32_t> ids = c["prompt_ids"].get<std::vector<int32_t>>();
    if (ids.size() > max_len) ids.resize(max_len);
    out.push_back(ids);
    if (out.size() == n) break;
  }
  return out;
}

struct Agreement {
  size_t agree = 0, total = 0, identical_runs = 0;
  double max_logit_diff = 0;
};

// The scaled model against the bundled one: free-running greedy tokens, and (teacher-
// forced on the bundled model's tokens) argmax agreement and the largest logit gap.
Agreement compare_with_source(const vc::Model& scaled, vc::DType kv, size_t steps = 64) {
  const vc::Model& src = *vc::test::tinycode();
  Agreement a;
  for (const auto& p : prompts(4, 96)) {
    const Decoded ref = greedy(src, p, steps, kv);
    if (greedy(scaled, p, steps, kv).ids == ref.ids) ++a.identical_runs;
    const Decoded got = greedy(scaled, p, steps, kv, &ref.ids);
    for (size_t i = 0; i < steps; ++i) {
      a.agree += got.ids[i] == ref.ids[i];
      ++a.total;
      for (size_t v = 0; v < ref.logits[i].size(); ++v)
        a.max_logit_diff = std::max(a.max_logit_diff,
                                    double(std::fabs(got.logits[i][v] - ref.logits[i][v])));
    }
  }
  std::printf("[ agreement ] %zu/%zu teacher-forced argmax, %zu/4 identical 64-token runs, "
              "max |logit diff| %.3g\n", a.agree, a.total, a.identical_runs, a.max_logit_diff);
  return a;
}

TEST(model_random, writes_a_checkpoint_the_loader_accepts_with_the_shape_of_the_config) {
  ScratchDir dir;
  vc::RandomModelOptions opt;
  opt.seed = 7;
  opt.tokenizer_dir = VC_MODEL_DIR;
  const auto shape = vc::load_shape("test-tiny", kShapesDir);
  const auto g = vc::write_random_model(shape, dir / "m", opt);
  const auto m = vc::Model::load(dir / "m");
  EXPECT_EQ(m->config().hidden_size, 320);
  EXPECT_EQ(m->config().num_layers, 8);
  EXPECT_EQ(m->config().num_heads, 6);
  EXPECT_EQ(m->config().head_dim, 128);
  EXPECT_EQ(m->parameter_count(), g.checkpoint.parameters);
  EXPECT_TRUE(fs::exists(dir / "m" / "tokenizer.json"));
  EXPECT_TRUE(fs::exists(dir / "m" / "MODEL_CARD.md"));
  // It runs, and its weights are bell-shaped around 0 with the init's spread.
  const auto logits = greedy(*m, {2046, 5, 9}, 2, vc::DType::bf16).logits;
  EXPECT_EQ(logits[0].size(), 2048u);
  double s2 = 0;
  const size_t n = 1 << 16;
  for (size_t i = 0; i < n; ++i) {
    const double z = vc::random_weight_value(7, 99, i);
    s2 += z * z;
  }
  EXPECT_NEAR(std::sqrt(s2 / n), 1.0, 0.02);
}

TEST(model_random, is_deterministic_per_seed_and_differs_between_seeds) {
  ScratchDir dir;
  const auto shape = vc::load_shape("test-tiny", kShapesDir);
  vc::RandomModelOptions opt;
  opt.tokenizer_dir = VC_MODEL_DIR;
  opt.seed = 3;
  opt.threads = 1;
  (void)vc::write_random_model(shape, dir / "a", opt);
  opt.threads = 2;
  (void)vc::write_random_model(shape, dir / "b", opt);
  opt.seed = 4;
  (void)vc::write_random_model(shape, dir / "c", opt);
  const std::string a = file_bytes(dir / "a" / "model.safetensors");
  EXPECT_EQ(a, file_bytes(dir / "b" / "model.safetensors"));
  EXPECT_NE(a, file_bytes(dir / "c" / "model.safetensors"));
}

TEST(model_random, shards_a_large_checkpoint_with_an_index_and_the_same_tensors) {
  ScratchDir dir;
  const auto shape = vc::load_shape("test-tiny", kShapesDir);
  vc::RandomModelOptions opt;
  opt.tokenizer_dir = VC_MODEL_DIR;
  (void)vc::write_random_model(shape, dir / "one", opt);
  opt.max_shard_bytes = size_t(4) << 20;
  const auto g = vc::write_random_model(shape, dir / "sharded", opt);
  EXPECT_GT(g.checkpoint.files.size(), 3u);
  EXPECT_TRUE(fs::exists(dir / "sharded" / "model.safetensors.index.json"));
  const auto a = vc::Model::load(dir / "one"), b = vc::Model::load(dir / "sharded");
  const vc::Weight& wa = a->weights().layers[5].w_down;
  const vc::Weight& wb = b->weights().layers[5].w_down;
  EXPECT_EQ(0, std::memcmp(wa.data, wb.data, wa.rows * wa.cols * 2));
  // Writing again over a generated directory replaces its shards (no stale files).
  opt.max_shard_bytes = size_t(5000) << 20;
  (void)vc::write_random_model(shape, dir / "sharded", opt);
  EXPECT_FALSE(fs::exists(dir / "sharded" / "model.safetensors.index.json"));
  (void)vc::Model::load(dir / "sharded");
}

TEST(model_scale, pads_every_dimension_and_keeps_the_bundled_models_greedy_tokens) {
  // test-tiny: hidden 320, 8 layers, 6/3 heads, head_dim 128, FFN 1024: all larger.
  vc::test::F32PathScope f32;  // f32 tolerances: activations kept in f32
  ScratchDir dir;
  const auto shape = vc::load_shape("test-tiny", kShapesDir);
  vc::ScaleOptions opt;
  opt.dtype = vc::DType::f32;  // the same function up to f32 rounding
  (void)vc::write_scaled_model(VC_MODEL_DIR, shape, dir / "f32", opt);
  const auto m32 = vc::Model::load(dir / "f32");
  EXPECT_EQ(m32->config().hidden_size, 320);
  EXPECT_EQ(m32->config().head_dim, 128);
  const Agreement a = compare_with_source(*m32, vc::DType::f32);
  EXPECT_EQ(a.identical_runs, 4u);
  EXPECT_EQ(a.agree, a.total);
  EXPECT_LT(a.max_logit_diff, 1e-4);

  opt.dtype = vc::DType::bf16;  // norms and queries rounded to bf16 again
  (void)vc::write_scaled_model(VC_MODEL_DIR, shape, dir / "bf16", opt);
  const Agreement b = compare_with_source(*vc::Model::load(dir / "bf16"), vc::DType::bf16);
  EXPECT_GE(double(b.agree), 0.97 * double(b.total));
  EXPECT_LT(b.max_logit_diff, 0.1);  // measured 0.02
}

TEST(model_scale, places_query_heads_on_copies_of_their_kv_heads_when_groups_shrink) {
  // 4/4 heads (MHA) from the bundled 4/2: each KV head is copied twice; head_dim kept;
  // Qwen2 with (zero) attention biases.
  vc::test::F32PathScope f32;  // f32 tolerances: activations kept in f32
  ScratchDir dir;
  const auto shape = shape_from(
      "mha", {{"architectures", {"Qwen2ForCausalLM"}}, {"hidden_size", 288},
              {"intermediate_size", 800}, {"num_hidden_layers", 6}, {"num_attention_heads", 4},
              {"num_key_value_heads", 4}, {"head_dim", 64}, {"vocab_size", 2048},
              {"rms_norm_eps", 1e-6}, {"rope_theta", 1e6}, {"max_position_embeddings", 4096},
              {"attention_bias", true}},
      dir / "");
  const auto layout = vc::scaled_head_layout(vc::test::tinycode()->config(), shape.parsed, "mha");
  EXPECT_EQ(layout.kv_copies, 2u);
  EXPECT_EQ(layout.query_head, (std::vector<size_t>{0, 1, 2, 3}));
  vc::ScaleOptions opt;
  opt.dtype = vc::DType::f32;
  (void)vc::write_scaled_model(VC_MODEL_DIR, shape, dir / "m", opt);
  const auto m = vc::Model::load(dir / "m");
  EXPECT_TRUE(m->config().attention_bias);
  const Agreement a = compare_with_source(*m, vc::DType::f32);
  EXPECT_EQ(a.agree, a.total);
  EXPECT_LT(a.max_logit_diff, 1e-4);
}

TEST(model_scale, refuses_a_shape_smaller_than_the_source_naming_the_field) {
  ScratchDir dir;
  auto small = vc::load_shape("test-tiny", kShapesDir);
  small.config["num_hidden_layers"] = 4;
  small.parsed.num_layers = 4;
  const std::string e = [&] {
    try {
      (void)vc::write_scaled_model(VC_MODEL_DIR, small, dir / "m", {});
    } catch (const vc::Error& x) {
      return std::string(x.what());
    }
    return std::string();
  }();
  EXPECT_NE(e.find("num_hidden_layers 4 is smaller than the source model's 6"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(dir / "m"));  // nothing written
  auto odd = vc::load_shape("test-tiny", kShapesDir);
  odd.parsed.head_dim = 96;
  EXPECT_THROW((void)vc::scaled_head_layout(vc::test::tinycode()->config(), odd.parsed, "odd"),
               vc::Error);
}

TEST(model_scale, refuses_a_shape_with_q_k_norm_before_writing_anything) {
  // It wrote a checkpoint without the q_norm/k_norm tensors its config.json asked for,
  // which then failed to load.
  ScratchDir dir;
  auto qwen3 = vc::load_shape("test-tiny", kShapesDir);
  qwen3.config["architectures"] = {"Qwen3ForCausalLM"};
  qwen3.config["model_type"] = "qwen3";
  qwen3.parsed = vc::parse_model_config(qwen3.config, "qwen3 shape");
  ASSERT_TRUE(qwen3.parsed.qk_norm);
  try {
    (void)vc::write_scaled_model(VC_MODEL_DIR, qwen3, dir / "m", {});
    ADD_FAILURE() << "scaled into a q/k-norm shape";
  } catch (const vc::Error& e) {
    EXPECT_NE(std::string(e.what()).find("--shape 'test-tiny': scale does not pad into shapes with q/k norm"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(dir / "m"));
}

TEST(model_shapes, every_bundled_shape_is_a_valid_config_with_the_bundled_vocabulary) {
  for (const std::string name : {"llama-3.2-1b", "llama-3.1-8b", "qwen2.5-7b", "llama-3-70b", "test-tiny"}) {
    const auto s = vc::load_shape(name, kShapesDir);
    EXPECT_EQ(s.parsed.vocab_size, 2048) << name;
    EXPECT_FALSE(s.config.contains("_comment")) << name;
    // Every real shape can hold the bundled model.
    EXPECT_NO_THROW((void)vc::scaled_head_layout(vc::test::tinycode()->config(), s.parsed, name));
  }
  const auto q = vc::load_shape("qwen2.5-7b", kShapesDir).parsed;
  EXPECT_EQ(q.hidden_size, 3584);
  EXPECT_EQ(q.num_heads, 28);
  EXPECT_EQ(q.num_kv_heads, 4);
  EXPECT_TRUE(q.attention_bias);
}

}  // namespace
