// Python value semantics for the Jinja renderer (jinja_values.hpp).
#include "tools/server/jinja_values.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "tools/server/jinja.hpp"

namespace vc::server::jinja {

[[noreturn]] void fail(int line, const std::string& what) {
  throw TemplateError("chat template line " + std::to_string(line) + ": " + what);
}

// UTF-8 code points of a string (Python indexes strings by them).
std::vector<std::string> code_points(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

std::string type_name(const json& v) { return undefined(v) ? "undefined" : v.type_name(); }

bool truthy(const json& v) {
  if (undefined(v) || v.is_null()) return false;
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number_integer()) return v.get<int64_t>() != 0;
  if (v.is_number()) return v.get<double>() != 0.0;
  if (v.is_string()) return !v.get_ref<const std::string&>().empty();
  return !v.empty();
}

std::string py_float(double d) {
  if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 1e16) return fmt::format("{:.1f}", d);
  return fmt::format("{}", d);
}

// Python's str().
std::string str(const json& v) {
  if (undefined(v)) return "";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return "None";
  if (v.is_boolean()) return v.get<bool>() ? "True" : "False";
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  if (v.is_number()) return py_float(v.get<double>());
  return repr(v);
}

std::string repr(const json& v) {
  if (v.is_string()) {
    std::string s = "'";
    for (char c : v.get<std::string>()) {
      if (c == '\'' || c == '\\') s += '\\';
      if (c == '\n') s += "\\n";
      else s += c;
    }
    return s + "'";
  }
  if (v.is_array()) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + repr(v[i]);
    return s + "]";
  }
  if (v.is_object()) {
    std::string s = "{";
    bool first = true;
    for (const auto& [k, x] : v.items()) {
      s += (first ? "" : ", ") + repr(json(k)) + ": " + repr(x);
      first = false;
    }
    return s + "}";
  }
  return str(v);
}

namespace {

std::string to_json_at(const json& v, int indent, int depth) {
  if (undefined(v)) return "null";
  if ((v.is_array() || v.is_object()) && !v.empty()) {
    const bool object = v.is_object();
    const std::string open = indent < 0 ? "" : "\n" + std::string(size_t(indent) * (depth + 1), ' ');
    const std::string sep = indent < 0 ? ", " : "," + open;
    std::string s(1, object ? '{' : '[');
    s += open;
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it) {
      s += first ? "" : sep;
      first = false;
      if (object) s += json(it.key()).dump(-1, ' ', false, json::error_handler_t::replace) + ": ";
      s += to_json_at(*it, indent, depth + 1);
    }
    if (indent >= 0) s += "\n" + std::string(size_t(indent) * depth, ' ');
    return s + (object ? '}' : ']');
  }
  if (v.is_number_float()) return py_float(v.get<double>());
  return v.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

// Python's json.dumps(ensure_ascii=False): ", " and ": " on one line, or with
// `indent`, one item a line and "," at the line ends.
std::string to_json(const json& v, int indent) {
  return to_json_at(v, indent, 0);
}

int64_t as_int(const json& v, int line, const char* what) {
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_boolean()) return v.get<bool>() ? 1 : 0;
  fail(line, std::string(what) + ": expected an integer, got " + type_name(v));
}

double as_number(const json& v, int line) {
  if (v.is_number() || v.is_boolean()) return v.is_boolean() ? double(v.get<bool>()) : v.get<double>();
  fail(line, "expected a number, got " + type_name(v));
}

json sequence_slice(const json& v, const json& a, const json& b, const json& c, int line) {
  const bool text = v.is_string();
  std::vector<json> items;
  if (text) {
    for (auto& cp : code_points(v.get<std::string>())) items.emplace_back(cp);
  } else if (v.is_array()) {
    items.assign(v.begin(), v.end());
  } else {
    fail(line, "cannot slice a " + type_name(v));
  }
  const auto n = int64_t(items.size());
  const int64_t step = c.is_null() || undefined(c) ? 1 : as_int(c, line, "slice step");
  if (step == 0) fail(line, "slice step cannot be zero");
  auto norm = [&](const json& x, int64_t dflt) {
    if (x.is_null() || undefined(x)) return dflt;
    int64_t i = as_int(x, line, "slice index");
    if (i < 0) i += n;
    if (step > 0) return std::clamp<int64_t>(i, 0, n);
    return std::clamp<int64_t>(i, -1, n - 1);
  };
  const int64_t lo = norm(a, step > 0 ? 0 : n - 1), hi = norm(b, step > 0 ? n : -1);
  json out = text ? json("") : json::array();
  for (int64_t i = lo; step > 0 ? i < hi : i > hi; i += step) {
    if (text) out.get_ref<std::string&>() += items[size_t(i)].get<std::string>();
    else out.push_back(items[size_t(i)]);
  }
  return out;
}

json item(const json& v, const json& key, int line) {
  if (undefined(v)) fail(line, "cannot index an undefined value");
  if (v.is_object()) {
    if (!key.is_string()) return kUndefined;
    const auto it = v.find(key.get<std::string>());
    return it == v.end() ? kUndefined : *it;
  }
  if (v.is_array() || v.is_string()) {
    if (!key.is_number_integer()) return kUndefined;
    int64_t i = key.get<int64_t>();
    if (v.is_string()) {
      const auto cps = code_points(v.get<std::string>());
      const auto n = int64_t(cps.size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) fail(line, "string index out of range");
      return cps[size_t(i)];
    }
    const auto n = int64_t(v.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) return kUndefined;
    return v[size_t(i)];
  }
  return kUndefined;
}

std::string strip_chars(const std::string& s, const std::string& chars, bool left, bool right) {
  size_t b = 0, e = s.size();
  if (left) while (b < e && chars.find(s[b]) != std::string::npos) ++b;
  if (right) while (e > b && chars.find(s[e - 1]) != std::string::npos) --e;
  return s.substr(b, e - b);
}

bool equal(const json& a, const json& b) {
  if (undefined(a) || undefined(b)) return undefined(a) && undefined(b);
  if (a.is_object() && b.is_object()) {
    if (a.size() != b.size()) return false;
    for (auto it = a.begin(); it != a.end(); ++it) {
      const auto other = b.find(it.key());
      if (other == b.end() || !equal(*it, *other)) return false;
    }
    return true;
  }
  if (a.is_array() && b.is_array())
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), equal);
  return a == b;
}

}  // namespace vc::server::jinja
