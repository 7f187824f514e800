// `vericache generate` with the n-gram drafting level and with threshold
// selection, as a user runs it: same ids and logprobs as full mode, the per-level
// and achieved-ratio figures in --json, one-line errors for bad values; and `bench
// acceptance --thresholds`, each threshold beside ratio rows at its achieved ratio.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "tests/cli/cli_support.hpp"

namespace {

using vc::test::run_vericache;

const std::string kRepetitive =
    "generate --prompt '<|begin_of_text|>def area(w, h):\n    return w * h\n\n"
    "def area2(w, h):\n    return w * h\n\ndef area3(w, h):\n' "
    "--max-tokens 40 --json --logprobs --ignore-eos";

TEST(cli_draft_hierarchy, ngram_level_prints_the_ids_of_full_mode_and_stats_per_level) {
  for (const std::string sampling : {"", " --temperature 0.7 --seed 5"}) {
    const auto full = run_vericache(kRepetitive + sampling, false);
    ASSERT_EQ(full.code, 0) << full.out;
    const auto fj = nlohmann::json::parse(full.out);
    const auto r = run_vericache(kRepetitive + sampling +
                                     " --mode vericache --compressor snapkv --draft 12 "
                                     "--draft-hierarchy ngram --ngram-min 1 --ngram-max 3 "
                                     "--ngram-proposal 6",
                                 false);
    ASSERT_EQ(r.code, 0) << r.out;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(fj["output_ids"], j["output_ids"]) << sampling;
    EXPECT_EQ(fj["output_logprobs"].dump(), j["output_logprobs"].dump()) << sampling;
    const auto& v = j["stats"]["vericache"];
    EXPECT_EQ(v["draft_hierarchy"], "ngram");
    const auto& l = v["levels"];
    EXPECT_GT(l["ngram"]["proposed"].get<int>(), 0) << l.dump();
    EXPECT_GE(l["ngram"]["proposed"].get<int>(), l["ngram"]["kept_by_drafter"].get<int>());
    EXPECT_GE(l["ngram"]["kept_by_drafter"].get<int>(), l["ngram"]["accepted_by_verifier"].get<int>());
    EXPECT_GT(l["ngram"]["seconds"].get<double>(), 0.0) << "the level's cost: its lookups took time";
    EXPECT_LT(l["ngram"]["seconds"].get<double>(), l["drafter"]["seconds"].get<double>()) << l.dump();
    EXPECT_EQ(l["verifier"]["accepted"], v["accepted_tokens"]);
  }
}

TEST(cli_draft_hierarchy, bad_hierarchy_or_ngram_values_are_one_line_errors) {
  const std::string base = "generate --prompt x --mode vericache";
  for (const auto& [args, word] : std::initializer_list<std::pair<std::string, std::string>>{
           {" --draft-hierarchy eagle", "--draft-hierarchy"},
           {" --ngram-min 0", "--ngram-min"},
           {" --ngram-proposal many", "--ngram-proposal"},
           {" --draft-hierarchy ngram --ngram-min 3 --ngram-max 2", "--ngram-max"}}) {
    const auto r = run_vericache(base + args, true);
    EXPECT_EQ(r.code, 1) << args << ": " << r.out;
    EXPECT_NE(r.out.find(word), std::string::npos) << args << ": " << r.out;
    EXPECT_EQ(r.out.find('\n'), r.out.size() - 1) << args << ": one line, got " << r.out;
  }
  const auto batch = run_vericache(
      "batch --input /dev/null --output /dev/null --ngram-min 4 --ngram-max 2", true);
  EXPECT_EQ(batch.code, 1) << batch.out;
  EXPECT_NE(batch.out.find("--ngram-max"), std::string::npos) << batch.out;
}

TEST(cli_threshold, threshold_selection_stays_exact_and_reports_the_achieved_ratio) {
  const std::string base =
      "generate --prompt '<|begin_of_text|>import os\nimport sys\n\ndef main(argv):\n"
      "    for name in argv:\n        print(os.path.basename(name))\n' --max-tokens 24 --json "
      "--logprobs --ignore-eos";
  const auto full = nlohmann::json::parse(run_vericache(base, false).out);
  const auto r = run_vericache(base + " --mode vericache --compressor kvzip --threshold 0.02 "
                                      "--keep-recent 8 --draft 8",
                               false);
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(full["output_ids"], j["output_ids"]);
  EXPECT_EQ(full["output_logprobs"].dump(), j["output_logprobs"].dump());
  EXPECT_EQ(j["stats"]["compression"]["selection"], "threshold");
  EXPECT_GE(j["stats"]["compression"]["achieved_ratio"].get<double>(), 1.0);
}

TEST(cli_threshold, bench_acceptance_puts_each_threshold_beside_ratio_rows_at_the_ratio_it_achieved) {
  const std::string base =
      "bench acceptance --compressor snapkv --thresholds 0.2 1 --keep-recent 32 --drafts 8 "
      "--steps 16 --max-prompt-tokens 400 --json";
  const auto r = run_vericache(base, false);
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["outputs_differing_from_full"], 0);
  const auto& rows = j["rows"];
  ASSERT_EQ(rows.size(), 4u) << "no fixed-ratio rows without --ratios: " << rows.dump();
  double last = 0;
  for (size_t i = 0; i < 4; i += 2) {
    const std::string tau = i == 0 ? "0.2" : "1";
    EXPECT_EQ(rows[i]["selection"], "threshold " + tau);
    EXPECT_EQ(rows[i + 1]["selection"], "ratio as " + tau);
    const double by_threshold = rows[i]["achieved_ratio"].get<double>();
    const double by_ratio = rows[i + 1]["achieved_ratio"].get<double>();
    EXPECT_GT(by_threshold, 1.0) << tau;
    EXPECT_NEAR(by_ratio, by_threshold, 0.1 * by_threshold) << "matched per prompt, threshold " << tau;
    EXPECT_GT(by_threshold, last) << "a higher threshold drops more";
    last = by_threshold;
  }
  const auto with_ratio = run_vericache(base + " --ratios 4", false);
  ASSERT_EQ(with_ratio.code, 0) << with_ratio.out;
  const auto j2 = nlohmann::json::parse(with_ratio.out);
  const auto& rows2 = j2["rows"];
  ASSERT_EQ(rows2.size(), 5u);
  EXPECT_EQ(rows2[0]["selection"], "ratio 4");
  EXPECT_NEAR(rows2[0]["achieved_ratio"].get<double>(), 4.0, 0.4);
}

TEST(cli_threshold, a_method_without_scores_or_a_bad_threshold_is_a_one_line_error) {
  const auto pos = run_vericache(
      "generate --prompt x --mode lossy --compressor streaming_llm --threshold 0.1", true);
  EXPECT_EQ(pos.code, 1) << pos.out;
  EXPECT_NE(pos.out.find("threshold selection needs a method that scores tokens"),
            std::string::npos) << pos.out;
  const auto bad = run_vericache("generate --prompt x --mode lossy --threshold lots", true);
  EXPECT_EQ(bad.code, 1) << bad.out;
  EXPECT_NE(bad.out.find("--threshold"), std::string::npos) << bad.out;
}

}  // namespace
