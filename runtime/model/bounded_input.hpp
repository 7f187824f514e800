// Reading untrusted input with limits: a whole file capped in bytes (a directory,
// a missing file or /dev/zero gets a clear error instead of an endless read), one
// line of a stream capped in bytes, and JSON capped in nesting depth (checked on
// the text before parsing, so a document nested tens of thousands deep never
// reaches the recursive parser or the code that prints values into messages).
#pragma once
#include <cstddef>
#include <filesystem>
#include <istream>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

namespace vc {

/// Limits on one input. Defaults fit every file this project reads.
struct InputLimits {
  size_t max_bytes = size_t(64) << 20;  ///< 64 MiB
  size_t max_depth = 64;                ///< nesting of JSON arrays and objects
};

/// The byte cap for the files a user names directly (prompt files, --config files).
inline constexpr size_t kMaxTextFileBytes = size_t(16) << 20;  // 16 MiB
/// The byte cap for model files read whole (config.json, tokenizer.json, indexes).
inline constexpr size_t kMaxModelJsonBytes = size_t(256) << 20;  // 256 MiB

/// Reads the whole file at `path`. Throws vc::Error starting with `what` (e.g.
/// "--prompt-file 'x.txt'") when it is missing, a directory, unreadable, or longer
/// than `max_bytes` (a pipe or a device is read up to the cap, never further).
[[nodiscard]] std::string read_file_bounded(const std::filesystem::path& path, size_t max_bytes,
                                            const std::string& what);

/// Throws vc::Error unless `path` exists and is not a directory (for files opened
/// by a streaming reader). `what` names the option or role.
void require_readable_file(const std::filesystem::path& path, const std::string& what);

/// The next line of `in` without its '\n' (and '\r'), or nullopt at the end.
/// Throws vc::Error naming `what` and the line number when a line is longer than
/// `max_bytes` (a file without newlines, such as /dev/zero, stops there).
[[nodiscard]] std::optional<std::string> read_line_bounded(std::istream& in, size_t max_bytes,
                                                           size_t line_number,
                                                           const std::string& what);

/// Parses JSON text after checking its nesting depth and size. Throws vc::Error
/// starting with `source` ("not valid JSON: ...", "nested deeper than 64 levels ..."),
/// or with no prefix when `source` is empty.
[[nodiscard]] nlohmann::json parse_json_bounded(std::string_view text, const std::string& source,
                                                const InputLimits& limits = {});

/// The deepest nesting of arrays and objects in JSON text (strings skipped), stopping
/// early once it exceeds `stop_above`.
[[nodiscard]] size_t json_nesting_depth(std::string_view text, size_t stop_above);

}  // namespace vc
