// Tokenizer tests: the bundled tinycode tokenizer against the golden data, and
// small hand-built tokenizer.json objects for byte-level, Llama-3 Split and
// Metaspace / byte-fallback BPE, plus the error messages for bad input.
#include "runtime/model/tokenizer.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "kernels/error.hpp"

namespace vc {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;
using Ids = std::vector<int32_t>;

const char* const kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

json load_json(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

const Tokenizer& tinycode() {
  static const Tokenizer t = Tokenizer::from_file(std::string(VC_MODEL_DIR) + "/tokenizer.json");
  return t;
}

// GPT-2's printable character for byte b, written independently of the runtime.
std::string byte_char(unsigned b) {
  auto printable = [](unsigned x) { return (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174; };
  unsigned cp = b;
  if (!printable(b)) {
    cp = 256;
    for (unsigned x = 0; x < b; ++x) cp += printable(x) ? 0 : 1;
  }
  if (cp < 0x80) return std::string(1, static_cast<char>(cp));
  return {static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
}

// A byte-level BPE tokenizer: ids 0..255 are the bytes, `extra` adds tokens from 256.
json byte_level(const std::vector<std::string>& extra, const json& merges, const json& pre_tokenizer) {
  json vocab = json::object();
  for (unsigned b = 0; b < 256; ++b) vocab[byte_char(b)] = b;
  for (std::size_t i = 0; i < extra.size(); ++i) vocab[extra[i]] = 256 + i;
  return {{"added_tokens", json::array()},
          {"normalizer", nullptr},
          {"pre_tokenizer", pre_tokenizer},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
}

json gpt2_pre(bool add_prefix_space = false) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", add_prefix_space}, {"use_regex", true}};
}

json llama3_pre() {
  return {{"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"}, {"pattern", {{"Regex", kLlama3Regex}}}, {"behavior", "Isolated"}, {"invert", false}},
            {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
}

// Llama-2 style: <unk> <s> </s>, 256 byte tokens (ids 3..258), then pieces from 259.
const char* const kPieces[] = {"▁", "h", "e", "l", "o", "w", "r", "d", "▁h", "el", "lo",
                               "▁hel", "▁hello", "▁w", "or", "▁wor", "ld", "▁world"};
constexpr int32_t kSpace = 259, kH = 260, kE = 261, kL = 262, kW = 264, kSpH = 267, kEl = 268, kLo = 269;
constexpr int32_t kHello = 271, kSpW = 272, kWorld = 276;
int32_t byte_id(unsigned b) { return 3 + static_cast<int32_t>(b); }

json metaspace_tokenizer(bool byte_fallback = true) {
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (unsigned b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    vocab[name] = byte_id(b);
  }
  for (std::size_t i = 0; i < std::size(kPieces); ++i) vocab[kPieces[i]] = 259 + i;
  json added = json::array();
  for (int id = 0; id < 3; ++id) {
    added.push_back({{"id", id}, {"content", id == 0 ? "<unk>" : id == 1 ? "<s>" : "</s>"}, {"special", true}});
  }
  return {
      {"added_tokens", added},
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers",
         {{{"type", "Prepend"}, {"prepend", "▁"}},
          {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "▁"}}}}}},
      {"pre_tokenizer", nullptr},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders",
         {{{"type", "Replace"}, {"pattern", {{"String", "▁"}}}, {"content", " "}},
          {{"type", "ByteFallback"}},
          {{"type", "Fuse"}},
          {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
      {"model",
       {{"type", "BPE"},
        {"unk_token", "<unk>"},
        {"byte_fallback", byte_fallback},
        {"fuse_unk", true},
        {"vocab", vocab},
        {"merges",
         {"▁ h", "e l", "l o", "▁h el", "▁hel lo", "▁ w", "o r", "▁w or", "l d", "▁wor ld"}}}}};
}

// The newer Llama / Mistral layout: no normalizer, a Metaspace pre-tokenizer and decoder.
json metaspace_pre(const std::string& scheme, bool split) {
  json j = metaspace_tokenizer();
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", scheme}, {"split", split}};
  j["decoder"] = {{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", scheme}, {"split", split}};
  return j;
}

Ids concat(Ids a, const Ids& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no vc::Error thrown)";
}

// ---- the bundled tinycode tokenizer ----------------------------------------

TEST(tokenizer, reproduces_every_golden_tokenizer_case) {
  const json golden = load_json(std::string(VC_TEST_DATA_DIR) + "/visible.json");
  ASSERT_FALSE(golden["tokenizer_cases"].empty());
  for (const auto& c : golden["tokenizer_cases"]) {
    const auto text = c["text"].get<std::string>();
    const auto ids = c["ids"].get<Ids>();
    EXPECT_EQ(tinycode().encode(text), ids) << text;
    EXPECT_EQ(tinycode().decode(ids), c["decoded"].get<std::string>()) << text;
  }
}

TEST(tokenizer, encodes_every_golden_prompt_with_and_without_a_literal_bos) {
  const json golden = load_json(std::string(VC_TEST_DATA_DIR) + "/visible.json");
  const auto bos = golden["bos_id"].get<int32_t>();
  ASSERT_FALSE(golden["cases"].empty());
  for (const auto& c : golden["cases"]) {
    const auto text = c["prompt_text"].get<std::string>();
    const auto ids = c["prompt_ids"].get<Ids>();
    EXPECT_EQ(tinycode().encode("<|begin_of_text|>" + text), ids) << c["name"];
    EXPECT_EQ(concat({bos}, tinycode().encode(text)), ids) << c["name"];
    EXPECT_EQ(tinycode().decode(ids), "<|begin_of_text|>" + text);
    EXPECT_EQ(tinycode().decode(ids, /*skip_special=*/true), text);
  }
}

TEST(tokenizer, reports_vocab_size_and_token_ids) {
  EXPECT_EQ(tinycode().vocab_size(), 2048);
  EXPECT_EQ(tinycode().token_id("<|begin_of_text|>"), 2046);
  EXPECT_EQ(tinycode().token_id("<|end_of_text|>"), 2047);
  EXPECT_EQ(tinycode().token_id("Ġ"), 32);
  EXPECT_EQ(tinycode().token_id("no such token"), std::nullopt);
}

TEST(tokenizer, never_adds_bos_and_splits_special_tokens_out_of_text) {
  EXPECT_TRUE(tinycode().encode("").empty());
  EXPECT_EQ(tinycode().encode("x"), Ids{120});
  EXPECT_EQ(tinycode().encode("x<|end_of_text|><|end_of_text|> x"),
            concat(concat({120}, {2047, 2047}), tinycode().encode(" x")));
  EXPECT_EQ(tinycode().decode(Ids{120, 2047}, true), "x");
}

TEST(tokenizer, keeps_bytes_of_incomplete_utf8_when_decoding) {
  EXPECT_EQ(tinycode().decode(Ids{230, 151}), "\xE6\x97");
  EXPECT_EQ(tinycode().decode(Ids{230, 151, 165}), "日");
}

// ---- byte-level BPE ----------------------------------------------------------

TEST(tokenizer, merges_lowest_rank_first_in_either_merge_notation) {
  const std::vector<std::string> extra = {"ab", "bc"};
  const Tokenizer bc_first = Tokenizer::from_json(byte_level(extra, {"b c", "a b"}, gpt2_pre()), "t");
  const Tokenizer ab_first = Tokenizer::from_json(byte_level(extra, json::array({json::array({"a", "b"}), json::array({"b", "c"})}), gpt2_pre()), "t");
  EXPECT_EQ(bc_first.encode("abc"), (Ids{'a', 257}));
  EXPECT_EQ(ab_first.encode("abc"), (Ids{256, 'c'}));
  EXPECT_EQ(ab_first.decode(Ids{256, 'c'}), "abc");
}

TEST(tokenizer, byte_level_add_prefix_space_prepends_one_space) {
  const std::vector<std::string> extra = {"Ġh", "Ġhi"};
  const json merges = {"Ġ h", "Ġh i"};
  EXPECT_EQ(Tokenizer::from_json(byte_level(extra, merges, gpt2_pre(true)), "t").encode("hi"), Ids{257});
  EXPECT_EQ(Tokenizer::from_json(byte_level(extra, merges, gpt2_pre(false)), "t").encode("hi"), (Ids{'h', 'i'}));
  EXPECT_EQ(Tokenizer::from_json(byte_level(extra, merges, gpt2_pre(true)), "t").encode(" hi"), Ids{257});
}

TEST(tokenizer, ignore_merges_emits_a_whole_pre_token_found_in_the_vocab) {
  json j = byte_level({"xyz"}, json::array(), gpt2_pre());
  EXPECT_EQ(Tokenizer::from_json(j, "t").encode("xyz"), (Ids{'x', 'y', 'z'}));
  j["model"]["ignore_merges"] = true;
  EXPECT_EQ(Tokenizer::from_json(j, "t").encode("xyz xy"), (Ids{256, 32, 'x', 'y'}));
}

TEST(tokenizer, llama3_split_regex_groups_digits_by_three_and_folds_contraction_case) {
  const std::vector<std::string> extra = {"34", "12", "123", "45", "'M"};
  const json merges = {"3 4", "1 2", "12 3", "4 5", "' M"};
  const Tokenizer gpt2 = Tokenizer::from_json(byte_level(extra, merges, gpt2_pre()), "gpt2");
  const Tokenizer llama3 = Tokenizer::from_json(byte_level(extra, merges, llama3_pre()), "llama3");
  EXPECT_EQ(gpt2.encode("12345"), (Ids{257, 256, '5'}));
  EXPECT_EQ(llama3.encode("12345"), (Ids{258, 259}));
  EXPECT_EQ(gpt2.encode("I'M"), (Ids{'I', '\'', 'M'}));
  EXPECT_EQ(llama3.encode("I'M"), (Ids{'I', 260}));
  // "[^\r\n\p{L}\p{N}]?\p{L}+" keeps one punctuation mark with the word; bytes of
  // non-ASCII letters map through the byte table.
  EXPECT_EQ(llama3.encode("(日"), (Ids{'(', 0xE6, 0x97, 0xA5}));
  for (const char* text : {"12345", "I'M x\n\n  y", "(日 \t\r\nok"}) EXPECT_EQ(llama3.decode(llama3.encode(text)), text);
}

TEST(tokenizer, added_tokens_honour_longest_match_lstrip_rstrip_and_single_word) {
  json j = byte_level({}, json::array(), gpt2_pre());
  j["added_tokens"] = {{{"id", 300}, {"content", "<a>"}, {"lstrip", true}},
                       {{"id", 301}, {"content", "<a><b>"}, {"rstrip", true}},
                       {{"id", 302}, {"content", "ab"}, {"single_word", true}},
                       {{"id", 303}, {"content", "<c>"}}};
  const Tokenizer t = Tokenizer::from_json(j, "t");
  EXPECT_EQ(t.encode("x  <a>"), (Ids{'x', 300}));
  EXPECT_EQ(t.encode("<a><b>  x"), (Ids{301, 'x'}));
  EXPECT_EQ(t.encode("x <c> x"), (Ids{'x', 32, 303, 32, 'x'}));
  EXPECT_EQ(t.encode("ab xab"), (Ids{302, 32, 'x', 'a', 'b'}));
  EXPECT_EQ(t.decode(Ids{'x', 300, 303}), "x<a><c>");
  EXPECT_EQ(t.vocab_size(), 304);
}

// ---- Metaspace / byte-fallback BPE -----------------------------------------

TEST(tokenizer, llama2_normalizer_prepends_and_replaces_spaces_before_bpe) {
  const Tokenizer t = Tokenizer::from_json(metaspace_tokenizer(), "llama2");
  EXPECT_EQ(t.encode("hello world"), (Ids{kHello, kWorld}));
  EXPECT_EQ(t.decode(Ids{kHello, kWorld}), "hello world");
  EXPECT_EQ(t.encode("<s>hello"), (Ids{1, kHello}));
  EXPECT_EQ(t.decode(Ids{1, kHello}), "<s> hello");
  EXPECT_EQ(t.decode(Ids{1, kHello}, /*skip_special=*/true), "hello");
}

TEST(tokenizer, byte_fallback_spells_unknown_characters_as_byte_tokens) {
  const Tokenizer t = Tokenizer::from_json(metaspace_tokenizer(), "llama2");
  const Ids ids = t.encode("hi 日");
  EXPECT_EQ(ids, (Ids{kSpH, byte_id('i'), kSpace, byte_id(0xE6), byte_id(0x97), byte_id(0xA5)}));
  EXPECT_EQ(t.decode(ids), "hi 日");
  EXPECT_EQ(t.decode(Ids{byte_id(0xE6), byte_id(0x97)}), "\xE6\x97");
}

TEST(tokenizer, without_byte_fallback_unknown_characters_become_one_fused_unk) {
  const Tokenizer t = Tokenizer::from_json(metaspace_tokenizer(false), "llama2");
  EXPECT_EQ(t.encode("hi日x"), (Ids{kSpH, 0}));
  EXPECT_EQ(t.encode("he"), (Ids{kSpH, kE}));
}

TEST(tokenizer, metaspace_prepend_scheme_first_only_prefixes_the_start_of_the_input) {
  const Tokenizer t = Tokenizer::from_json(metaspace_pre("first", true), "mistral");
  EXPECT_EQ(t.encode("hello world"), (Ids{kHello, kWorld}));
  EXPECT_EQ(t.encode("<s>hello"), (Ids{1, kH, kEl, kLo}));
  EXPECT_EQ(t.decode(Ids{kHello, kWorld}), "hello world");
  const Ids ids = t.encode("hi 日");
  EXPECT_EQ(t.decode(ids), "hi 日");
}

TEST(tokenizer, metaspace_prepend_scheme_always_and_never) {
  const Tokenizer always = Tokenizer::from_json(metaspace_pre("always", true), "t");
  EXPECT_EQ(always.encode("<s>hello"), (Ids{1, kHello}));
  const Tokenizer never = Tokenizer::from_json(metaspace_pre("never", true), "t");
  EXPECT_EQ(never.encode("hello world"), (Ids{kH, kEl, kLo, kWorld}));
  EXPECT_EQ(never.decode(Ids{kH, kEl, kLo, kWorld}), "hello world");
  EXPECT_EQ(never.decode(Ids{kSpace, kW}), " w");
}

TEST(tokenizer, metaspace_split_stops_merges_across_words) {
  json j = metaspace_pre("always", false);
  j["model"]["vocab"]["o▁"] = 300;
  j["model"]["merges"].insert(j["model"]["merges"].begin(), "o ▁");
  EXPECT_EQ(Tokenizer::from_json(j, "t").encode("lo w"), (Ids{kSpace, kL, 300, kW}));
  j["pre_tokenizer"]["split"] = true;
  EXPECT_EQ(Tokenizer::from_json(j, "t").encode("lo w"), (Ids{kSpace, kLo, kSpW}));
}

// ---- bad input -------------------------------------------------------------

TEST(tokenizer, rejects_a_missing_file_or_non_json_naming_the_file) {
  EXPECT_THAT(error_of([] { (void)Tokenizer::from_file("/no/such/dir/tokenizer.json"); }),
              HasSubstr("/no/such/dir/tokenizer.json: cannot open"));
  const auto path = std::filesystem::temp_directory_path() / "vc_tokenizer_test_bad.json";
  std::ofstream(path) << "{ not json";
  EXPECT_THAT(error_of([&] { (void)Tokenizer::from_file(path); }), HasSubstr(path.string() + ": not valid JSON"));
  std::filesystem::remove(path);
}

TEST(tokenizer, rejects_missing_or_unsupported_models_naming_the_field) {
  EXPECT_THAT(error_of([] { (void)Tokenizer::from_json({{"version", "1.0"}}, "x.json"); }),
              HasSubstr("x.json: field 'model': missing"));
  for (const char* type : {"WordPiece", "Unigram"}) {
    json j = metaspace_tokenizer();
    j["model"]["type"] = type;
    const std::string msg = error_of([&] { (void)Tokenizer::from_json(j, "x.json"); });
    EXPECT_THAT(msg, HasSubstr("x.json: field 'model.type'"));
    EXPECT_THAT(msg, HasSubstr(type));
  }
}

TEST(tokenizer, rejects_a_vocabulary_id_far_past_any_real_vocabulary_before_allocating_for_it) {
  // The id-to-token table is as long as the largest id: 2^31 - 1 failed as "out of
  // memory", 300,000,000 loaded in 12 GB.
  for (const int64_t id : {int64_t(300000000), int64_t(INT32_MAX), int64_t(1) << 22}) {
    json j = byte_level({}, json::array(), gpt2_pre());
    j["model"]["vocab"]["zzzzqq"] = id;
    const std::string msg = error_of([&] { (void)Tokenizer::from_json(j, "x.json"); });
    EXPECT_THAT(msg, HasSubstr("x.json: field 'model.vocab'"));
    EXPECT_THAT(msg, HasSubstr("\"zzzzqq\" is " + std::to_string(id) + ", past the largest"));
  }
  json j = byte_level({}, json::array(), gpt2_pre());
  j["model"]["vocab"]["zzzzqq"] = 300000;  // sparse, above every real vocabulary: read
  EXPECT_EQ(Tokenizer::from_json(j, "x.json").vocab_size(), 300001);
}

TEST(tokenizer, rejects_unsupported_components_naming_the_field) {
  json j = byte_level({}, json::array(), {{"type", "Sequence"}, {"pretokenizers", {gpt2_pre(), {{"type", "Whitespace"}}}}});
  std::string msg = error_of([&] { (void)Tokenizer::from_json(j, "x.json"); });
  EXPECT_THAT(msg, HasSubstr("x.json: field 'pre_tokenizer.pretokenizers[1].type'"));
  EXPECT_THAT(msg, HasSubstr("Whitespace"));
  j = byte_level({}, json::array(), {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}});
  EXPECT_THAT(error_of([&] { (void)Tokenizer::from_json(j, "x.json"); }), HasSubstr("field 'pre_tokenizer.pattern'"));
  j = byte_level({}, json::array(), gpt2_pre());
  j["normalizer"] = {{"type", "Lowercase"}};
  EXPECT_THAT(error_of([&] { (void)Tokenizer::from_json(j, "x.json"); }), HasSubstr("field 'normalizer.type'"));
  j["normalizer"] = nullptr;
  j["decoder"] = {{"type", "WordPiece"}};
  EXPECT_THAT(error_of([&] { (void)Tokenizer::from_json(j, "x.json"); }), HasSubstr("field 'decoder.type'"));
}

TEST(tokenizer, rejects_a_merge_that_names_an_unknown_token) {
  const json j = byte_level({"ab"}, {"a b", "ab zz"}, gpt2_pre());
  const std::string msg = error_of([&] { (void)Tokenizer::from_json(j, "x.json"); });
  EXPECT_THAT(msg, HasSubstr("x.json: field 'model.merges[1]'"));
  EXPECT_THAT(msg, HasSubstr("\"zz\""));
}

}  // namespace
}  // namespace vc
