// Option validators, the strict --config reader and the one-line error report.
#include "tools/vericache/options.hpp"

#include "kernels/error.hpp"

#include <algorithm>
#include <map>
#include <iostream>
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "kvtiers/paged_kv_cache.hpp"
#include "runtime/device.hpp"
#include "runtime/model/bounded_input.hpp"
#include "runtime/request_validation.hpp"

namespace vc::cli {

namespace {

constexpr size_t kMaxConfigBytes = size_t(1) << 20;

// A validator whose check throws FieldError; CLI11 prefixes the option's name.
template <typename Check>
CLI::Validator checked(std::string description, Check check) {
  return CLI::Validator(
      [check](std::string& text) -> std::string {
        try {
          check(text);
          return {};
        } catch (const FieldError& e) {
          return e.message();
        }
      },
      std::move(description));
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

}  // namespace

CLI::Validator integer_in(int64_t lo, int64_t hi) {
  return checked("INT", [lo, hi](const std::string& s) {
    check_integer_range("", parse_integer("", s), lo, hi);
  });
}

CLI::Validator number_in(double lo, double hi, bool lo_open) {
  return checked("NUMBER", [lo, hi, lo_open](const std::string& s) {
    check_number_range("", parse_number("", s), lo, hi, lo_open);
  });
}

CLI::Validator seed_value() {
  return checked("0..2^64-1", [](const std::string& s) { (void)parse_seed("", s); });
}

CLI::Validator draft_value() {
  return checked("L|auto", [](const std::string& s) { (void)parse_draft("", s); });
}

size_t parse_bytes(const std::string& what, const std::string& text) {
  size_t i = 0;
  unsigned long long v = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
    if (v > (std::numeric_limits<unsigned long long>::max() - 9) / 10)
      throw Error(what + ": '" + text + "' is too large");
    v = v * 10 + unsigned(text[i++] - '0');
  }
  unsigned shift = 0;
  if (i < text.size()) {
    switch (text[i]) {
      case 'K': case 'k': shift = 10; break;
      case 'M': case 'm': shift = 20; break;
      case 'G': case 'g': shift = 30; break;
      case 'T': case 't': shift = 40; break;
      default: break;
    }
    if (shift > 0) ++i;
    if (i < text.size() && (text[i] == 'B' || text[i] == 'b')) ++i;
  }
  if (i == 0 || i != text.size())
    throw Error(what + ": expected a byte count such as 268435456, 256M or 2G, got '" + text + "'");
  if (shift > 0 && v > (std::numeric_limits<unsigned long long>::max() >> shift))
    throw Error(what + ": '" + text + "' is too large");
  return size_t(v << shift);
}

CLI::Validator bytes_value() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        try {
          (void)parse_bytes("value", s);
          return "";
        } catch (const std::exception& e) {
          const std::string m = e.what();
          return m.substr(m.find(':') + 2);
        }
      },
      "BYTES");
}

void add_draft_hierarchy_options(CLI::App& cmd, RequestInput& q) {
  cmd.add_option("--draft-hierarchy", q.draft_hierarchy,
                 "vericache: levels above the compressed-KV drafter: none, or ngram (prompt "
                 "lookup proposes tokens from the request's own text; the drafter checks them "
                 "in one pass)")
      ->capture_default_str()->check(checked("none|ngram", [](const std::string& s) {
        if (s != "none" && s != "ngram")
          throw FieldError("draft_hierarchy", "expected none or ngram, got '" + s + "'");
      }));
  cmd.add_option("--ngram-min", q.ngram_min, "ngram: shortest context suffix matched")
      ->capture_default_str()->check(integer_in(1, kMaxNgram));
  cmd.add_option("--ngram-max", q.ngram_max, "ngram: longest context suffix matched")
      ->capture_default_str()->check(integer_in(1, kMaxNgram));
  cmd.add_option("--ngram-proposal", q.ngram_proposal,
                 "ngram: tokens proposed per drafter pass at most")
      ->capture_default_str()->check(integer_in(1, int64_t(kMaxDraftLength)));
}

void check_ngram_sizes(const RequestInput& q) {
  if (q.ngram_max < q.ngram_min)
    throw Error("--ngram-max: expected at least --ngram-min (" + std::to_string(q.ngram_min) +
                "), got " + std::to_string(q.ngram_max));
}

void add_device_option(CLI::App& cmd, std::string& device) {
  cmd.add_option("--device", device,
                 "Where the forward passes run: cpu, or cuda[:N] (the model's weights on GPU N, "
                 "whole passes there, attention over device copies of the KV the passes read; "
                 "the KV tiers, compressors and sampling stay on the CPU)")
      ->capture_default_str()
      ->check([](const std::string& s) {
        try {
          (void)parse_device(s);
          return std::string();
        } catch (const std::exception& e) {
          const std::string what = e.what();  // "device: expected ..."
          return what.starts_with("device: ") ? what.substr(8) : what;
        }
      });
}

void add_gpu_memory_option(CLI::App& cmd, double& utilization) {
  cmd.add_option("--gpu-memory-utilization", utilization,
                 "On a GPU without --fast-memory: the share of the device's memory this process "
                 "may hold (weights and KV); the KV budget is what is left of it once the "
                 "weights are on the device")
      ->capture_default_str()
      ->check(number_in(0.0, 1.0, true));
}

void add_block_tokens_option(CLI::App& cmd, size_t& block_tokens) {
  cmd.add_option("--block-tokens", block_tokens,
                 "KV positions per paged block (prefix sharing and remote chunks go by whole "
                 "blocks; outputs are exact at any size, their bits belong to the size)")
      ->capture_default_str()->check(integer_in(1, int64_t(kMaxBlockTokens)));
}

void add_prefill_chunk_option(CLI::App& cmd, size_t& prefill_chunk) {
  cmd.add_option("--prefill-chunk", prefill_chunk,
                 "Prompt tokens per prefill chunk: the most a decoding request waits for between "
                 "two of its steps while a prompt is prefilled (same tokens at any size)")
      ->capture_default_str()->check(integer_in(1, 65536));
}

void check_remote_chunk(size_t chunk_tokens, size_t block_tokens) {
  if (block_tokens > 0 && chunk_tokens % block_tokens != 0)
    throw Error("--remote-chunk: expected whole KV blocks (a multiple of --block-tokens, " +
                std::to_string(block_tokens) + "), got " + std::to_string(chunk_tokens));
}

std::string engine_error_with_flags(const std::string& what, const std::string& concurrency_flag) {
  static const std::pair<const char*, const char*> kFlags[] = {
      {"fast_memory_bytes", "--fast-memory"},
      {"gpu_memory_utilization", "--gpu-memory-utilization"},
      {"kv_dtype", "--kv-dtype"},
      {"full_tier", "--full-tier"},
      {"verify_batch", "--verify-batch"},
      {"prefill_chunk", "--prefill-chunk"},
      {"device", "--device"},
      {"placement", "--placement"},
      {"tp", "--tp"},
      {"remote_url", "--remote"},
      {"remote_fetchers", "--remote-fetchers"},
      {"max_active", nullptr},
  };
  const std::string prefix = "EngineConfig.";
  if (!what.starts_with(prefix)) return what;
  const size_t end = what.find_first_not_of("abcdefghijklmnopqrstuvwxyz_", prefix.size());
  const std::string field = what.substr(prefix.size(), end - prefix.size());
  for (const auto& [name, flag] : kFlags)
    if (field == name)
      return std::string(flag ? flag : concurrency_flag.c_str()) + " (" + what.substr(0, end) + ")" +
             (end == std::string::npos ? std::string() : what.substr(end));
  return what;
}

void add_remote_options(CLI::App& cmd, RemoteArgs& r) {
  cmd.add_option("--remote", r.url,
                 "lossy/vericache: remote prefix cache redis://HOST:PORT (prefix KV fetched, "
                 "the rest prefilled and published; a store fault means recompute)");
  cmd.add_option("--remote-chunk", r.chunk, "Tokens per remote chunk (whole KV blocks)")
      ->capture_default_str()->check(integer_in(1, 1 << 20));
  cmd.add_option("--remote-ttl", r.ttl, "Seconds published chunks live (0 = no expiry)")
      ->capture_default_str()->check(integer_in(0, int64_t(1) << 30));
  cmd.add_option("--remote-timeout-ms", r.timeout_ms,
                 "Deadline of a connect and of each pipelined batch")
      ->capture_default_str()->check(integer_in(1, 600000));
  cmd.add_option("--remote-retry-ms", r.retry_ms, kRemoteRetryHelp)
      ->capture_default_str()->check(integer_in(0, 3600000));
  cmd.add_option("--remote-flow", r.flow,
                 "compressed-first: draft from the prefix's compressed chunks while its full "
                 "chunks arrive; full: fetch the full chunks, then prefill and compress here")
      ->capture_default_str()->check(CLI::IsMember({"compressed-first", "full"}));
  cmd.add_option("--remote-predraft", r.predraft, kRemotePredraftHelp)
      ->capture_default_str()->check(integer_in(0, 1 << 20));
  cmd.add_flag("--remote-recompute-front", r.recompute_front, kRemoteRecomputeFrontHelp);
  cmd.add_flag("--remote-recompute-front-when-idle", r.recompute_front_when_idle,
               "As --remote-recompute-front, but only for a request alone in the engine when its "
               "fetch starts; beside others, fetch then prefill (their decoding keeps the cores)");
  CLI::Option* priced = cmd.add_flag("--remote-recompute-front-priced", r.recompute_front_priced,
               "As --remote-recompute-front when it saves the request more time than it takes "
               "from the others: beside n requests, when a position has taken more than n times "
               "as long to fetch as to prefill so far (alone: always)");
  priced->excludes("--remote-recompute-front-when-idle");
  cmd.add_option("--remote-fetchers", r.fetchers,
                 "net_fetcher actors (own connections each): one request's long fetch does not "
                 "hold up the others'")
      ->capture_default_str()->check(integer_in(1, 64));
  cmd.add_option("--remote-fetch-segment", r.fetch_segment,
                 "Full chunks per fetch: a long prefix comes a segment at a time, and requests "
                 "waiting for a net_fetcher get it between segments (0 = the whole prefix at once)")
      ->capture_default_str()->check(integer_in(0, 1 << 20));
  cmd.add_option("--remote-compressed-suffix", r.compressed_suffix,
                 "compressed-first: the longest prompt suffix past the cached compressed chunks "
                 "drafted over before the exact prefill (reserved when the chunks arrive, if the "
                 "budget has room; else the full flow; 0 = one chunk)")
      ->capture_default_str()->check(integer_in(0, 1 << 24));
}

std::string option_of_field(const std::string& field) {
  std::string o = field;
  std::replace(o.begin(), o.end(), '_', '-');
  return "--" + o;
}

std::vector<CLI::ConfigItem> StrictConfig::from_config(std::istream& in) const {
  const std::string file =
      config_option_ && !config_option_->results().empty() ? config_option_->results().back()
                                                           : std::string("--config");
  auto fail = [&](size_t line, const std::string& what) -> void {
    throw CLI::ConfigError(file + (line ? ":" + std::to_string(line) : "") + ": " + what);
  };
  // The whole file, capped: /dev/zero or a wrong file stops at the cap.
  std::string text;
  {
    char buf[1 << 14];
    while (in) {
      in.read(buf, sizeof buf);
      text.append(buf, size_t(in.gcount()));
      if (text.size() > kMaxConfigBytes) fail(0, "larger than the limit of 1 MiB; is it a config file?");
    }
  }
  if (text.find('\0') != std::string::npos) fail(0, "holds binary data (a NUL byte); expected a text config file");
  if (text.starts_with("\xEF\xBB\xBF")) text.erase(0, 3);  // a UTF-8 byte order mark, as editors write it

  std::vector<CLI::ConfigItem> items;
  std::vector<std::string> section;  // subcommand path
  CLI::App* sub = nullptr;
  std::map<std::string, size_t> seen;  // section and option -> the line that set it
  size_t line_no = 0;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    std::string line = text.substr(pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    // Strip a comment (# or ;) outside quotes.
    bool quoted = false;
    char quote = 0;
    for (size_t i = 0; i < line.size(); ++i) {
      const char c = line[i];
      if (quoted) {
        if (c == '\\') ++i;
        else if (c == quote) quoted = false;
      } else if (c == '"' || c == '\'') {
        quoted = true;
        quote = c;
      } else if (c == '#' || c == ';') {
        line.resize(i);
        break;
      }
    }
    line = trim(line);
    if (line.empty()) continue;
    if (line.front() == '[') {
      if (line.back() != ']') fail(line_no, "unterminated section header '" + line + "'; expected [name]");
      const std::string name = trim(line.substr(1, line.size() - 2));
      section.clear();
      sub = &app_;
      for (const auto& part : CLI::detail::split(name, '.')) {
        CLI::App* next = nullptr;
        for (CLI::App* s : sub->get_subcommands([](CLI::App*) { return true; }))
          if (s->get_name() == trim(part)) next = s;
        if (next == nullptr) {
          std::string known;
          for (CLI::App* s : sub->get_subcommands([](CLI::App*) { return true; })) known += (known.empty() ? "" : ", ") + s->get_name();
          fail(line_no, "unknown section [" + name + "] (known: " + known + ")");
        }
        section.push_back(trim(part));
        sub = next;
      }
      continue;
    }
    const size_t eq = line.find('=');
    if (eq == std::string::npos) fail(line_no, "expected 'key = value' or '[section]', got '" + line.substr(0, 40) + "'");
    const std::string key = trim(line.substr(0, eq));
    const std::string raw = trim(line.substr(eq + 1));
    CLI::App* owner = sub != nullptr ? sub : &app_;
    CLI::Option* op = key.empty() ? nullptr : owner->get_option_no_throw("--" + key);
    if (op == nullptr || op == config_option_) {
      if (sub == nullptr)
        fail(line_no, "key '" + key + "' before any [section] (options of a subcommand go under "
                      "[generate], [batch], [bench.decode], ...)");
      fail(line_no, "unknown key '" + key + "' in [" + CLI::detail::join(section, ".") + "]");
    }
    // A key given twice in one section: which one was meant is not for us to guess.
    const std::string where = CLI::detail::join(section, ".");
    if (const auto [it, fresh] = seen.try_emplace(where + "\n" + op->get_name(), line_no); !fresh)
      fail(line_no, "'" + key + "' is set twice in [" + where + "] (first at line " +
                        std::to_string(it->second) + ")");
    // The value: "string", 'string', [a, b, ...] or a bare word.
    std::vector<std::string> values;
    auto unquote = [&](std::string v) {
      v = trim(v);
      if (v.size() >= 2 && (v.front() == '"' || v.front() == '\'')) {
        if (v.back() != v.front()) fail(line_no, "unterminated string in '" + key + "'");
        return v.substr(1, v.size() - 2);
      }
      if (!v.empty() && (v.front() == '"' || v.front() == '\''))
        fail(line_no, "unterminated string in '" + key + "'");
      return v;
    };
    if (!raw.empty() && raw.front() == '[') {
      if (raw.back() != ']') fail(line_no, "unterminated list in '" + key + "'");
      // Split at the commas outside quotes: ["snapkv,kivi"] is one value.
      const std::string body = raw.substr(1, raw.size() - 2);
      std::vector<std::string> parts(1);
      char quote = 0;
      for (const char ch : body) {
        if (quote == 0 && ch == ',') {
          parts.emplace_back();
          continue;
        }
        if (quote == 0 && (ch == '"' || ch == '\'')) quote = ch;
        else if (ch == quote) quote = 0;
        parts.back() += ch;
      }
      for (const auto& v : parts)
        if (!trim(v).empty()) values.push_back(unquote(v));
    } else {
      if (raw.empty()) fail(line_no, "no value for '" + key + "'");
      values.push_back(unquote(raw));
    }
    // Applied when the command line did not set it and its subcommand runs; the
    // sections of commands that do not run are checked for keys above, but their
    // values are not handed on (CLI11 would check them with no line to name).
    const bool runs = sub == nullptr || sub->parsed();
    if (!runs) continue;
    CLI::ConfigItem item;
    item.parents = section;
    item.name = key;
    item.inputs = values;
    items.push_back(item);
    if (op->count() == 0) origins_[op->get_name()] = file + ":" + std::to_string(line_no);
  }
  return items;
}

std::string StrictConfig::origin_of(const std::string& option) const {
  auto it = origins_.find(option);
  return it == origins_.end() ? std::string() : it->second;
}

void report_error(const std::string& message, const StrictConfig* config) {
  std::string prefix;
  if (config != nullptr && message.starts_with("--")) {
    const std::string option = message.substr(0, message.find(':'));
    const std::string origin = config->origin_of(option);
    if (!origin.empty()) prefix = origin + ": ";
  }
  std::string line = message;
  std::replace(line.begin(), line.end(), '\n', ' ');
  std::cerr << "error: " << prefix << line << std::endl;
}

std::vector<std::pair<double, double>> load_row_costs(const std::string& path) {
  const std::string what = "--row-costs '" + path + "'";
  const std::string text = read_file_bounded(path, size_t(1) << 20, what);
  std::vector<std::pair<double, double>> out;
  try {
    const auto j = nlohmann::json::parse(text);
    if (!j.is_object() || !j.contains("rows") || !j["rows"].is_array() || j["rows"].empty())
      throw Error("expected the JSON of `vericache bench rows --json` (an object with a "
                  "non-empty \"rows\" array)");
    for (const auto& r : j["rows"]) {
      if (!r.is_object() || !r.contains("rows") || !r.contains("ms_per_pass") ||
          !r["rows"].is_number() || !r["ms_per_pass"].is_number())
        throw Error("each entry of \"rows\" needs numbers \"rows\" and \"ms_per_pass\"");
      const double rows = r["rows"].get<double>(), ms = r["ms_per_pass"].get<double>();
      if (!(rows >= 1) || !(ms >= 0) || (!out.empty() && !(rows > out.back().first)))
        throw Error("entries need rows >= 1, ascending, and ms_per_pass >= 0");
      out.emplace_back(rows, ms / 1e3);
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(what + ": not valid JSON (" + std::string(e.what()) + ")");
  } catch (const Error& e) {
    if (std::string(e.what()).rfind(what, 0) == 0) throw;
    throw Error(what + ": " + e.what());
  }
  return out;
}

}  // namespace vc::cli
