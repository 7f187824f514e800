// forward() with a pass's rows kept on the device (runtime/device_rows.hpp), the way
// `--device cuda` runs whole layers there, checked where no GPU is: a host double of
// DeviceRows whose "device memory" is buffers of its own (filled with NaN when they
// grow, so a step that reads what no step wrote shows) and whose steps are the CPU's
// kernels. Its bits are then the CPU model's, so the model must give exactly the CPU
// model's output in every flow; with a skew (each residual sum one ulp up: other
// bits, as a GPU's kernels give) vericache must still equal full decoding. Its steps
// wait in a queue until the host waits, as on a stream, so a missing sync shows. The CUDA
// side (CudaRows) is checked by cuda_device.* on a GPU.
#include "runtime/device_rows.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "kernels/cpu/elementwise.hpp"
#include "kernels/cpu/matmul.hpp"
#include "kernels/dtype.hpp"
#include "kvtiers/compressor.hpp"
#include "runtime/compression.hpp"
#include "runtime/forward.hpp"
#include "runtime/generator.hpp"
#include "runtime/linear_backend.hpp"
#include "tests/runtime/exactness_check.hpp"
#include "tests/runtime/host_staging_attention.hpp"
#include "tests/runtime/test_support.hpp"

namespace vc {
namespace {

/// The CPU's products (cpu::matmul, the CPU model's bits) over host rows, and rows()
/// giving HostRows below. Counts what the passes did.
class HostRowsLinear final : public LinearBackend {
 public:
  HostRowsLinear(const Weight& watched, bool skew) : skew_(skew), watched_(watched.data) {}
  [[nodiscard]] const std::string& description() const override { return name_; }
  [[nodiscard]] std::string numerics() const override { return skew_ ? name_ + " skewed" : name_; }
  void linear(const float* x, size_t M, const Weight& w, const Weight& bias, float* y) override {
    ++host_products;
    product(x, M, w, bias, y, false);
  }
  std::unique_ptr<DeviceRows> rows() override;

  void product(const float* x, size_t M, const Weight& w, const Weight& bias, float* y, bool prompt) {
    if (w.data == watched_) (prompt ? prompt_rows : step_rows) += M;
    std::vector<float> b;
    if (bias.present()) {
      b.resize(bias.cols);
      to_f32(bias.dtype, bias.data, b.data(), b.size());
    }
    cpu::matmul(x, M, w.cols, w.data, w.dtype, w.rows, b.empty() ? nullptr : b.data(), y, nullptr);
  }

  std::atomic<size_t> passes{0}, host_products{0}, step_rows{0}, prompt_rows{0};
  // Floats that went down (per buffer) and up, over every pass.
  std::atomic<size_t> down[DeviceRows::kBufs] = {}, up{0};
  const bool skew_;

 private:
  const void* watched_;
  std::string name_ = "host rows";
};

/// Queues its steps the way a GPU stream does: each step is recorded with the
/// buffer addresses and host arguments of its call (a launch's), and runs only when
/// the host waits, at sync(), download() or a reserve() that grows a buffer (which
/// waits before freeing, as CudaRows does). A caller that reads a buffer through
/// at() (the attention backend) without waiting first reads what the queued steps
/// have not written yet, and the suites fail.
class HostRows final : public DeviceRows {
 public:
  explicit HostRows(HostRowsLinear& owner) : owner_(owner) { ++owner.passes; }
  void reserve(Buf b, size_t n) override {
    if (buf_[b].size() >= n) return;
    run_queued();
    buf_[b].assign(n, std::numeric_limits<float>::quiet_NaN());
  }
  float* at(Buf b) override { return buf_[b].data(); }
  void embed(std::span<const int32_t> tokens, const Weight& table, size_t row0) override {
    later([ids = std::vector<int32_t>(tokens.begin(), tokens.end()), table, row0, out = at(x)] {
      const size_t D = table.cols;
      for (size_t m = 0; m < ids.size(); ++m) {
        const size_t t = size_t(ids[m]) - row0;
        if (size_t(ids[m]) < row0 || t >= table.rows) {
          std::fill_n(out + m * D, D, 0.0f);
          continue;
        }
        to_f32(table.dtype, static_cast<const std::byte*>(table.data) + t * D * dtype_size(table.dtype),
               out + m * D, D);
      }
    });
  }
  void rms_norm(Buf in, size_t rows, size_t dim, const Weight& w, float eps, Buf out) override {
    later([i = at(in), rows, dim, w, eps, o = at(out)] { cpu::rms_norm(i, rows, dim, w.data, w.dtype, eps, o); });
  }
  void linear(Buf in, size_t M, const Weight& w, const Weight& bias, Buf out, bool prompt) override {
    later([this, i = at(in), M, w, bias, o = at(out), prompt] { owner_.product(i, M, w, bias, o, prompt); });
  }
  void rope(Buf b, size_t M, size_t heads, size_t head_dim, std::span<const int32_t> positions,
            std::span<const float> inv_freq) override {
    later([p = at(b), M, heads, head_dim, pos = std::vector<int32_t>(positions.begin(), positions.end()),
           f = std::vector<float>(inv_freq.begin(), inv_freq.end())] {
      cpu::rope(p, M, heads, head_dim, pos.data(), f.data());
    });
  }
  void swiglu(size_t n) override {
    later([g = at(gate), u = at(up), n] { cpu::swiglu(g, u, g, n); });
  }
  void add(Buf into, Buf from, size_t n) override {
    later([this, to = at(into), f = at(from), n] {
      cpu::add_inplace(to, f, n);
      if (owner_.skew_)  // other bits than the CPU's: each sum one ulp up
        for (size_t i = 0; i < n; ++i) to[i] = std::nextafter(to[i], INFINITY);
    });
  }
  void gather(Buf from, std::span<const size_t> rows, size_t width, Buf to) override {
    later([f = at(from), r = std::vector<size_t>(rows.begin(), rows.end()), width, t = at(to)] {
      for (size_t i = 0; i < r.size(); ++i) std::copy_n(f + r[i] * width, width, t + i * width);
    });
  }
  void scatter(Buf from, std::span<const size_t> rows, size_t width, Buf to) override {
    later([f = at(from), r = std::vector<size_t>(rows.begin(), rows.end()), width, t = at(to)] {
      for (size_t i = 0; i < r.size(); ++i) std::copy_n(f + i * width, width, t + r[i] * width);
    });
  }
  void download(Buf b, size_t offset, size_t n, float* host) override {
    owner_.down[b] += n;
    run_queued();
    std::copy_n(at(b) + offset, n, host);
  }
  void upload(const float* host, size_t n, Buf b, size_t offset) override {
    owner_.up += n;
    // Read at the call, as a copy from pageable memory is.
    later([data = std::vector<float>(host, host + n), to = at(b) + offset] {
      std::copy(data.begin(), data.end(), to);
    });
  }
  void sync() override { run_queued(); }

 private:
  void later(std::function<void()> step) { queued_.push_back(std::move(step)); }
  void run_queued() {
    std::vector<std::function<void()>> steps;
    steps.swap(queued_);  // a step that throws leaves none of them queued
    for (const auto& step : steps) step();
  }

  HostRowsLinear& owner_;
  std::vector<float> buf_[kBufs];
  std::vector<std::function<void()>> queued_;
};

std::unique_ptr<DeviceRows> HostRowsLinear::rows() { return std::make_unique<HostRows>(*this); }

std::shared_ptr<HostRowsLinear> rows_backend(const Model& m, bool skew = false) {
  return std::make_shared<HostRowsLinear>(m.weights().layers.at(0).wq, skew);
}

Generator make_generator(std::shared_ptr<const Model> m) {
  GeneratorConfig gc;
  gc.max_context = 2048;
  gc.stage_positions = 64;  // verify passes stage their KV a block at a time
  return Generator(std::move(m), test::tinycode_tokenizer(), gc);
}

std::vector<int32_t> golden_prompt(size_t i) {
  return test::golden()["cases"][i]["prompt_ids"].get<std::vector<int32_t>>();
}

TEST(device_rows, a_model_whose_rows_stay_on_the_device_gives_the_cpu_models_output_bit_for_bit) {
  const auto cpu = test::tinycode();
  auto cpu_gen = make_generator(cpu);
  const auto prompt = golden_prompt(3);
  // Attention on the CPU (queries down, outputs up every layer) and through a
  // device's attention backend (queries and outputs its buffers' addresses).
  for (const bool device_attention : {false, true}) {
    const auto rows = rows_backend(*cpu);
    const auto attention = device_attention ? std::make_shared<test::HostStagingAttention>() : nullptr;
    auto gen = make_generator(Model::with_backends(cpu, rows, attention));
    for (const SamplingParams& sp : {SamplingParams{}, SamplingParams{0.9f, 50, 0.95f, 1234}}) {
      GenerateOptions base;
      base.max_tokens = 24;
      base.sampling = sp;
      base.stop_at_eos = false;
      const std::string how = std::string(device_attention ? "attention on the device" : "attention on the CPU") +
                              (sp.temperature > 0 ? ", sampled" : ", greedy");
      const GenerateResult want = cpu_gen.generate(prompt, base);
      test::expect_identical(want, gen.generate(prompt, base), "full, " + how);
      for (const std::string& m : compressor_names()) {
        GenerateOptions o = base;
        o.mode = DecodeMode::vericache;
        o.compressor = m;
        o.draft_length = 8;
        const GenerateResult cpu_r = cpu_gen.generate(prompt, o);
        const GenerateResult r = gen.generate(prompt, o);
        test::expect_identical(cpu_r, r, m + ", " + how);
        EXPECT_EQ(cpu_r.stats.drafted, r.stats.drafted) << m << ", " << how;  // the CPU's drafts
        EXPECT_EQ(cpu_r.stats.accepted, r.stats.accepted) << m << ", " << how;
      }
    }
    EXPECT_GT(rows->passes.load(), 0u);
    EXPECT_EQ(rows->host_products.load(), 0u) << "every product ran over rows on the device";
    EXPECT_GT(rows->prompt_rows.load(), 0u);
    EXPECT_GT(rows->step_rows.load(), 0u);
    if (device_attention) {
      EXPECT_GT(attention->cached_rows.load(), 0u);
      EXPECT_GT(attention->passes.load(), 0u);  // verify passes over streamed chunks
      EXPECT_GT(attention->view_rows.load(), 0u);  // draft rows over views
    }
  }
}

TEST(device_rows, with_other_bits_on_the_device_vericache_still_equals_full_decoding) {
  const auto cpu = test::tinycode();
  const auto prompt = golden_prompt(2);
  auto cpu_gen = make_generator(cpu);
  auto gen = make_generator(
      Model::with_backends(cpu, rows_backend(*cpu, true), std::make_shared<test::HostStagingAttention>()));
  for (const SamplingParams& sp : {SamplingParams{}, SamplingParams{0.9f, 50, 0.95f, 77}}) {
    GenerateOptions base;
    base.max_tokens = 24;
    base.sampling = sp;
    base.stop_at_eos = false;
    const GenerateResult full = gen.generate(prompt, base);
    const GenerateResult on_cpu = cpu_gen.generate(prompt, base);
    ASSERT_EQ(full.output_logprobs.size(), on_cpu.output_logprobs.size());
    EXPECT_NE(0, std::memcmp(full.output_logprobs.data(), on_cpu.output_logprobs.data(),
                             full.output_logprobs.size() * sizeof(float)))
        << "the skew changed nothing: this test could not fail";
    for (const std::string& m : compressor_names()) {
      for (const size_t draft : {size_t(1), size_t(16)}) {
        GenerateOptions o = base;
        o.mode = DecodeMode::vericache;
        o.compressor = m;
        o.draft_length = draft;
        test::expect_identical(full, gen.generate(prompt, o),
                               m + " draft " + std::to_string(draft) + (sp.temperature > 0 ? " sampled" : " greedy"));
      }
    }
  }
}

// Runs `prompt` into a fresh sequence, then one decode step, counting what the
// step moved between host and device.
struct StepTraffic {
  size_t down[DeviceRows::kBufs] = {};
  size_t up = 0;
};

StepTraffic one_decode_step(const std::shared_ptr<const Model>& model, HostRowsLinear& rows,
                            test::HostStagingAttention* attention = nullptr, size_t* blocks_copied = nullptr) {
  PagedKvCache cache(model->kv_config(2048, DType::bf16));
  KvSequence seq;
  Workspace ws(1);
  const auto prompt = golden_prompt(0);
  (void)prefill(*model, prompt, seq, cache, ws);
  StepTraffic before;
  for (int b = 0; b < DeviceRows::kBufs; ++b) before.down[b] = rows.down[b];
  before.up = rows.up;
  const size_t copied_before = attention != nullptr ? attention->blocks_copied.load() : 0;
  cache.reserve(seq, prompt.size() + 1);
  const ForwardRow row{7, int32_t(prompt.size()), &seq, true};
  std::vector<float> logits;
  forward(*model, std::span(&row, 1), cache, ws, logits);
  StepTraffic t;
  for (int b = 0; b < DeviceRows::kBufs; ++b) t.down[b] = rows.down[b] - before.down[b];
  t.up = rows.up - before.up;
  if (blocks_copied != nullptr) *blocks_copied = attention->blocks_copied.load() - copied_before;
  return t;
}

TEST(device_rows, a_decode_step_moves_only_its_new_kv_and_its_logits_when_attention_is_on_the_device) {
  // (and the new K and V go into the device's copy of the cache from the device)
  const auto cpu = test::tinycode();
  const ModelConfig& c = cpu->config();
  const size_t layers = size_t(c.num_layers), kvd = size_t(c.num_kv_heads * c.head_dim);
  const size_t qd = size_t(c.num_heads * c.head_dim);
  {
    const auto rows = rows_backend(*cpu);
    const auto attention = std::make_shared<test::HostStagingAttention>();
    size_t blocks_copied = 0;
    const auto t = one_decode_step(Model::with_backends(cpu, rows, attention), *rows, attention.get(),
                                   &blocks_copied);
    // The new row went into the device's copy of the cache too (AttentionBackend::
    // wrote): no block of the cache had to go up again.
    EXPECT_EQ(blocks_copied, 0u);
    EXPECT_GT(attention->rows_written_through.load(), 0u);
    EXPECT_EQ(t.down[DeviceRows::k], layers * kvd);
    EXPECT_EQ(t.down[DeviceRows::v], layers * kvd);
    EXPECT_EQ(t.down[DeviceRows::logits], size_t(c.vocab_size));
    EXPECT_EQ(t.down[DeviceRows::q], 0u) << "queries stay on the device";
    EXPECT_EQ(t.down[DeviceRows::x] + t.down[DeviceRows::h] + t.down[DeviceRows::attn] +
                  t.down[DeviceRows::gate] + t.down[DeviceRows::up],
              0u);
    EXPECT_EQ(t.up, 0u);
  }
  {  // attention on the CPU: each layer's queries down, outputs up
    const auto rows = rows_backend(*cpu);
    const auto t = one_decode_step(Model::with_backends(cpu, rows, nullptr), *rows);
    EXPECT_EQ(t.down[DeviceRows::q], layers * qd);
    EXPECT_EQ(t.up, layers * qd);
  }
}

TEST(device_rows, a_pass_mixing_draft_rows_and_full_kv_rows_gathers_each_kind_for_its_attention) {
  // A draft row over a view, then full-KV rows of another sequence: each kind's
  // queries are gathered on the device for its attention call and the outputs put
  // back in their places. Logits and KV equal the CPU model's bit for bit.
  const auto cpu = test::tinycode();
  const auto rows = rows_backend(*cpu);
  const auto placed = Model::with_backends(cpu, rows, std::make_shared<test::HostStagingAttention>());
  const auto pa = golden_prompt(0), pb = golden_prompt(1);
  auto run = [&](const std::shared_ptr<const Model>& model, std::vector<float>& k_out) {
    PagedKvCache cache(model->kv_config(4096, DType::bf16));
    KvSequence a, b;
    Workspace ws(1);
    (void)prefill(*model, pa, a, cache, ws);
    (void)prefill(*model, pb, b, cache, ws);
    const auto c = make_compressor("streaming_llm");
    const CompressedView view = compress_layers(*c, pa.size(), cache_layer_reader(cache, a), nullptr,
                                                model_facts(*model, pa.size()), 4.0, 0);
    cache.reserve(a, pa.size() + 1);
    cache.reserve(b, pb.size() + 2);
    const int32_t na = int32_t(pa.size()), nb = int32_t(pb.size());
    const std::vector<ForwardRow> pass = {{12, na, &a, true, &view},
                                          {11, nb, &b, true, nullptr},
                                          {13, nb + 1, &b, true, nullptr}};
    std::vector<float> logits;
    forward(*model, pass, cache, ws, logits);
    k_out.resize(cache.config().kv_heads * cache.config().head_dim);
    std::vector<float> v(k_out.size());
    cache.read(1, b, size_t(nb) + 1, k_out.data(), v.data());  // the third row's K
    return logits;
  };
  std::vector<float> k_cpu, k_dev;
  const std::vector<float> want = run(cpu, k_cpu), got = run(placed, k_dev);
  ASSERT_EQ(want.size(), got.size());
  EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(k_cpu.data(), k_dev.data(), k_cpu.size() * sizeof(float)));
}

TEST(device_rows, a_backend_without_rows_keeps_products_over_host_rows) {
  // LinearBackend::rows() defaults to none: such a model multiplies host rows.
  struct PlainLinear final : LinearBackend {
    std::string name = "plain";
    std::atomic<size_t> calls{0};
    [[nodiscard]] const std::string& description() const override { return name; }
    void linear(const float* x, size_t M, const Weight& w, const Weight& bias, float* y) override {
      ++calls;
      std::vector<float> b;
      if (bias.present()) {
        b.resize(bias.cols);
        to_f32(bias.dtype, bias.data, b.data(), b.size());
      }
      cpu::matmul(x, M, w.cols, w.data, w.dtype, w.rows, b.empty() ? nullptr : b.data(), y, nullptr);
    }
  };
  const auto cpu = test::tinycode();
  auto plain = std::make_shared<PlainLinear>();
  auto gen = make_generator(Model::with_backends(cpu, plain, nullptr));
  auto cpu_gen = make_generator(cpu);
  GenerateOptions o;
  o.max_tokens = 8;
  o.stop_at_eos = false;
  test::expect_identical(cpu_gen.generate(golden_prompt(1), o), gen.generate(golden_prompt(1), o), "plain backend");
  EXPECT_GT(plain->calls.load(), 0u);
}

}  // namespace
}  // namespace vc
