// The one place a generation request is checked, whichever front end received it:
// `vericache generate` options, a `vericache batch` JSONL line, the embedding API
// (vericache::Engine::submit), and a future HTTP server. A front end builds a
// RequestInput (from options or with request_from_json), calls validate_request
// with the model's limits, and gets a ValidRequest or a FieldError naming the field
// and the value. The range helpers (parse_integer, check_integer_range, ...) are the
// ones the CLI's option validators use too, so every message reads the same.
#pragma once
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "kernels/error.hpp"
#include "runtime/generator.hpp"

namespace vc {

/// A bad field: field() is its request name ("max_tokens"), message() says what was
/// expected and what was given. what() is "field 'max_tokens': <message>".
class FieldError : public Error {
 public:
  FieldError(std::string field, std::string message);
  [[nodiscard]] const std::string& field() const { return field_; }
  [[nodiscard]] const std::string& message() const { return message_; }

 private:
  std::string field_, message_;
};

/// A request as received, before any check. These defaults are those of
/// `vericache generate` and of every batch line.
struct RequestInput {
  std::string prompt;               ///< tokenized as written (special tokens recognised)
  std::vector<int32_t> prompt_ids;  ///< used instead of `prompt` when non-empty
  int64_t max_tokens = 128;
  std::string mode = "full";        ///< "full", "lossy" or "vericache"
  std::string compressor = "snapkv";
  std::vector<std::pair<std::string, double>> compressor_params;
  double ratio = 4.0;
  std::string draft = "16";         ///< a length 0..4096, or "auto"
  int64_t fold_every = 64;
  std::string draft_hierarchy = "none";  ///< "none" or "ngram"
  int64_t ngram_min = 2, ngram_max = 4, ngram_proposal = 8;
  double temperature = 0.0;
  int64_t top_k = 0;
  double top_p = 1.0;
  uint64_t seed = 0;
  std::vector<std::string> stop;
  bool ignore_eos = false;
  bool logprobs = false;
  /// Alternatives reported per output token, 0..kMaxTopLogprobs; > 0 implies logprobs.
  int64_t top_logprobs = 0;
};

/// What the model allows a request.
struct RequestLimits {
  int vocab_size = 0;
  size_t context = 0;  ///< prompt + max_tokens positions at most
  const char* context_field = "max_position_embeddings";  ///< the config field it is
  [[nodiscard]] static RequestLimits of(const ModelConfig& c);
};

/// A request that passed every check.
struct ValidRequest {
  std::vector<int32_t> prompt_ids;
  GenerateOptions options;  ///< mode, compressor, ratio, draft, fold_every, sampling, stop, ...
  bool logprobs = false;    ///< report output logprobs (also when top_logprobs > 0)
  /// The same as options.sampling.top_logprobs.
  [[nodiscard]] int top_logprobs() const { return options.sampling.top_logprobs; }
};

// Range limits, declared once.
inline constexpr size_t kMaxDraftLength = 4096;
inline constexpr int64_t kMaxNgram = 64;  ///< ngram_min, ngram_max
inline constexpr double kMaxRatio = 1000.0;
inline constexpr size_t kMaxPromptBytes = size_t(16) << 20;  ///< prompt text

/// Checks every field against `limits`; tokenizes `prompt` with `tokenizer` when
/// prompt_ids is empty. Throws FieldError.
[[nodiscard]] ValidRequest validate_request(const RequestInput& in, const RequestLimits& limits,
                                            const Tokenizer* tokenizer);

/// Reads a JSON object into a RequestInput: type errors and unknown fields throw
/// FieldError. Keys in `extra_keys` (e.g. "id") are the caller's and skipped. The
/// JSON must come from parse_json_bounded (depth-limited).
/// Fields the object does not set keep their value in `base` (e.g. a CLI default).
[[nodiscard]] RequestInput request_from_json(const nlohmann::json& obj,
                                             const std::vector<std::string>& extra_keys = {},
                                             const RequestInput& base = {});

/// The field names request_from_json accepts, comma-separated (for messages).
[[nodiscard]] std::string request_field_names();

// ---- helpers shared with option validators; each throws FieldError(field, ...) ----

/// A whole decimal integer (no trailing text, no overflow).
[[nodiscard]] int64_t parse_integer(std::string_view field, std::string_view text);
/// A finite number.
[[nodiscard]] double parse_number(std::string_view field, std::string_view text);
/// A seed: an integer 0..2^64-1 (a minus sign or a larger value is an error).
[[nodiscard]] uint64_t parse_seed(std::string_view field, std::string_view text);
/// "auto" (returns nullopt-like {0, true}) or a length 0..kMaxDraftLength.
struct DraftChoice {
  size_t length = 0;
  bool is_auto = false;
};
[[nodiscard]] DraftChoice parse_draft(std::string_view field, std::string_view text);
void check_integer_range(std::string_view field, int64_t v, int64_t lo,
                         int64_t hi = std::numeric_limits<int64_t>::max());
/// lo_open: the lower bound itself is excluded.
void check_number_range(std::string_view field, double v, double lo,
                        double hi = std::numeric_limits<double>::infinity(), bool lo_open = false);

}  // namespace vc
