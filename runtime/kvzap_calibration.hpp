// Calibrating KVzap's surrogate on this runtime's own KVzip-style scores.
// Targets: for each text of n tokens, the model reads the text and then the text
// again (KVzip's context reconstruction, without a chat template: the bundled model
// has none); each position p < n of the first copy gets the KVzip score the kvzip
// method computes (kvtiers/compressors/kvzip_score.hpp) over that 2n-token pass with
// the repeat as the observation window: the largest attention any reconstruction
// query pays to p (summed over the KV head's query heads), or the mean attention p
// receives if larger. The target is log(max(score, 1e-12)) per KV head, as kvpress
// takes the log of its KVzip+ scores. Inputs: the layer's input hidden state of p
// after the attention RMSNorm, exactly what the prefill pass hands the surrogate.
// KvzapTargets::kvzip_plus uses kvpress's KVzip+ score instead: the largest, over
// the reconstruction queries t and the KV head's query heads h, of
// a_h(t, p) * ||W_o,h v_p|| / ||h_t|| (the attention weight times the norm of what p's
// value adds to the output through head h's block of o_proj, over the norm of the
// query row's input hidden state).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kvtiers/kvzap/fit.hpp"
#include "kvtiers/kvzap/surrogate.hpp"
#include "runtime/forward.hpp"
#include "runtime/generator.hpp"
#include "runtime/model.hpp"

namespace vc {

/// `count` texts of `tokens` tokens the model writes itself: its BOS, then tokens
/// sampled at temperature 1 with seed `seed + i` for text i (seeded sampling gives
/// the same ids on every machine and thread count). In-distribution text for the
/// model, made by a command from a seed rather than committed.
[[nodiscard]] std::vector<std::vector<int32_t>> kvzap_generated_texts(Generator& gen, size_t count,
                                                                      size_t tokens, uint64_t seed);

/// What the surrogate learns to predict (see above).
enum class KvzapTargets { kvzip, kvzip_plus };
/// "kvzip" or "kvzip-plus"; vc::Error otherwise.
[[nodiscard]] KvzapTargets parse_kvzap_targets(const std::string& s);

/// Samples of every layer: [layers], rows = total tokens over the texts.
[[nodiscard]] std::vector<KvzapSamples> kvzap_samples(const Model& model,
                                                      const std::vector<std::vector<int32_t>>& texts,
                                                      Workspace& ws,
                                                      KvzapTargets targets = KvzapTargets::kvzip);

/// How to fit.
struct KvzapFitOptions {
  KvzapForm form = KvzapForm::linear;
  double ridge_lambda = 1e-3;  // linear
  MlpTraining mlp;             // mlp
};

/// The fitted surrogate and R^2 of each layer on the samples.
struct KvzapFit {
  KvzapSurrogate surrogate;
  std::vector<double> r2;
};

/// Fits one surrogate per layer (layers in parallel on ws's pool; each fit is
/// sequential and seeded, so the result does not depend on the thread count).
[[nodiscard]] KvzapFit fit_kvzap(const Model& model, const std::vector<KvzapSamples>& samples,
                                 const KvzapFitOptions& opt, Workspace& ws);

}  // namespace vc
