// The shared request validation layer (runtime/request_validation.hpp): the checks
// every front end (generate, batch lines, the engine API) runs, field by field.
#include "runtime/request_validation.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/runtime/test_support.hpp"

namespace vc {
namespace {

using nlohmann::json;

const RequestLimits kLimits{2048, 512};

std::string field_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const FieldError& e) {
    return e.field() + ": " + e.message();
  }
  return "(no error)";
}

RequestInput with_ids() {
  RequestInput in;
  in.prompt_ids = {1, 2, 3};
  return in;
}

TEST(request_validation, defaults_are_those_of_generate) {
  const ValidRequest v = validate_request(with_ids(), kLimits, nullptr);
  EXPECT_EQ(v.options.mode, DecodeMode::full);
  EXPECT_EQ(v.options.max_tokens, 128);
  EXPECT_EQ(v.options.draft_length, 16u);
  EXPECT_EQ(v.options.fold_every, 64u);
  EXPECT_TRUE(v.options.stop_at_eos);
  EXPECT_TRUE(v.options.sampling.greedy());
}

TEST(request_validation, each_out_of_range_field_is_named_with_its_value) {
  struct Bad {
    void (*edit)(RequestInput&);
    std::string want;
  };
  const std::vector<Bad> cases = {
      {[](RequestInput& r) { r.max_tokens = 0; }, "max_tokens: expected an integer in 1..509"},
      {[](RequestInput& r) { r.max_tokens = 510; }, "max_tokens"},
      {[](RequestInput& r) { r.prompt_ids = {5, 4096}; }, "prompt_ids: token id 4096"},
      {[](RequestInput& r) { r.mode = "fast"; }, "mode: expected full, lossy or vericache, got 'fast'"},
      {[](RequestInput& r) { r.ratio = 0.5; }, "ratio: expected a finite number in [1, 1000], got 0.5"},
      {[](RequestInput& r) { r.ratio = std::nan(""); }, "ratio"},
      {[](RequestInput& r) { r.draft = "lots"; }, "draft: expected a length 0..4096 or 'auto'"},
      {[](RequestInput& r) { r.fold_every = -1; }, "fold_every: expected an integer in 0..1073741824, got -1"},
      {[](RequestInput& r) { r.temperature = -0.5; }, "temperature"},
      {[](RequestInput& r) { r.top_k = 5000; }, "top_k: expected an integer in 0..2048, got 5000"},
      {[](RequestInput& r) { r.top_p = 0; }, "top_p: expected a finite number in (0, 1], got 0"},
      {[](RequestInput& r) { r.stop = {""}; }, "stop"},
      {[](RequestInput& r) { r.top_logprobs = 21; }, "top_logprobs: expected an integer in 0..20, got 21"},
      {[](RequestInput& r) { r.top_logprobs = -1; }, "top_logprobs: expected an integer in 0..20, got -1"},
      {[](RequestInput& r) {
         r.mode = "vericache";
         r.compressor = "nope";
       },
       "compressor: "},
  };
  for (const auto& c : cases) {
    RequestInput in = with_ids();
    c.edit(in);
    const std::string got = field_of([&] { (void)validate_request(in, kLimits, nullptr); });
    EXPECT_NE(got.find(c.want), std::string::npos) << "want '" << c.want << "', got '" << got << "'";
  }
}

TEST(request_validation, a_text_prompt_is_tokenized_and_bounded_by_the_context) {
  const auto tok = test::tinycode_tokenizer();
  RequestInput in;
  in.prompt = "def f():";
  in.max_tokens = 4;
  const ValidRequest v = validate_request(in, kLimits, tok.get());
  EXPECT_EQ(v.prompt_ids, tok->encode("def f():"));
  in.prompt = "";
  EXPECT_NE(field_of([&] { (void)validate_request(in, kLimits, tok.get()); }).find("prompt: the prompt has no tokens"),
            std::string::npos);
}

TEST(request_validation, a_prompt_past_a_sliding_window_is_refused_naming_the_window) {
  // Sliding-window attention is not applied: within the window every position is
  // attended either way, beyond it the output would differ, so the window is the limit.
  ModelConfig c = test::tinycode()->config();
  c.sliding_window = 8;
  const RequestLimits limits = RequestLimits::of(c);
  EXPECT_EQ(limits.context, 8u);
  RequestInput in;
  in.prompt_ids = {1, 2, 3, 4, 5, 6, 7, 8};
  EXPECT_EQ(field_of([&] { (void)validate_request(in, limits, nullptr); }),
            "prompt_ids: the prompt has 8 tokens; the model's context holds 8 (sliding_window)");
  in.prompt_ids.resize(5);
  in.max_tokens = 3;
  EXPECT_EQ(validate_request(in, limits, nullptr).options.max_tokens, 3);
  in.max_tokens = 4;
  EXPECT_NE(field_of([&] { (void)validate_request(in, limits, nullptr); }).find("max_tokens"),
            std::string::npos);
}

TEST(request_validation, json_fields_are_type_checked_and_unknown_ones_rejected) {
  auto err = [](const std::string& text) {
    return field_of([&] { (void)request_from_json(json::parse(text), {"id"}); });
  };
  EXPECT_NE(err(R"({"prompt": "x", "max_tokens": "8"})").find("max_tokens: expected an integer"), std::string::npos);
  EXPECT_NE(err(R"({"prompt": "x", "colour": 1})").find("colour: unknown field"), std::string::npos);
  EXPECT_NE(err(R"({"prompt": "x", "seed": -1})").find("seed"), std::string::npos);
  EXPECT_NE(err(R"({"prompt": "x", "seed": 18446744073709551616})").find("seed"), std::string::npos);
  EXPECT_NE(err(R"({"max_tokens": 3})").find("prompt: missing"), std::string::npos);
  EXPECT_NE(err(R"({"prompt": "x", "prompt_ids": [1]})").find("not both"), std::string::npos);
  EXPECT_NE(err(R"([1])").find("expected a JSON object"), std::string::npos);
  const RequestInput r =
      request_from_json(json::parse(R"({"id": 7, "prompt": "x", "seed": 18446744073709551615})"), {"id"});
  EXPECT_EQ(r.seed, ~uint64_t(0));
  EXPECT_EQ(r.mode, "full");
}

TEST(request_validation, top_logprobs_reach_the_sampling_settings_and_imply_logprobs) {
  const ValidRequest none = validate_request(with_ids(), kLimits, nullptr);
  EXPECT_FALSE(none.logprobs);
  EXPECT_EQ(none.top_logprobs(), 0);
  RequestInput in = request_from_json(json::parse(R"({"prompt_ids": [1, 2], "top_logprobs": 20})"));
  const ValidRequest v = validate_request(in, kLimits, nullptr);
  EXPECT_TRUE(v.logprobs);
  EXPECT_EQ(v.options.sampling.top_logprobs, 20);
  EXPECT_NE(field_of([] {
              (void)request_from_json(json::parse(R"({"prompt": "x", "top_logprobs": 2.5})"));
            }).find("top_logprobs: expected an integer in 0..20"),
            std::string::npos);
}

TEST(request_validation, seeds_past_2_to_the_64_minus_1_and_negative_seeds_are_errors) {
  EXPECT_EQ(parse_seed("seed", "18446744073709551615"), ~uint64_t(0));
  EXPECT_THROW((void)parse_seed("seed", "18446744073709551616"), FieldError);
  EXPECT_THROW((void)parse_seed("seed", "-1"), FieldError);
  EXPECT_THROW((void)parse_seed("seed", "1e3"), FieldError);
}

}  // namespace
}  // namespace vc
