// Filters and tests of the Jinja subset (jinja_filters.hpp), Python's behaviour
// where templates depend on it.
#include "tools/server/jinja_filters.hpp"

#include <algorithm>
#include <cctype>
#include <string>

namespace vc::server::jinja {

json apply_filter(const std::string& f, const json& v, const std::vector<json>& a,
                  const std::vector<std::pair<std::string, json>>& kwargs, int line) {
  auto kwarg = [&](const std::string& name, const json& dflt) {
    for (const auto& [k, x] : kwargs)
      if (k == name) return x;
    return dflt;
  };
  if (f == "trim") return strip_chars(str(v), a.empty() ? kSpace : str(a[0]), true, true);
  if (f == "length" || f == "count") {
    if (v.is_string()) return code_points(v.get<std::string>()).size();
    if (v.is_array() || v.is_object()) return v.size();
    fail(line, "length of a " + type_name(v));
  }
  if (f == "string") return str(v);
  if (f == "tojson") {
    const json indent = kwarg("indent", a.empty() ? json(nullptr) : a[0]);
    if (!indent.is_null() && !indent.is_number_integer())
      fail(line, "tojson(indent=...) needs an integer, got " + type_name(indent));
    return to_json(v, indent.is_null() ? -1 : int(indent.get<int64_t>()));
  }
  if (f == "lower" || f == "upper") {
    std::string r = str(v);
    for (char& c : r) c = char(f == "upper" ? std::toupper(c) : std::tolower(c));
    return r;
  }
  if (f == "capitalize") {
    std::string r = str(v);
    for (char& c : r) c = char(std::tolower(c));
    if (!r.empty()) r[0] = char(std::toupper(r[0]));
    return r;
  }
  if (f == "default" || f == "d") {
    const bool boolean = a.size() > 1 && truthy(a[1]);
    if (undefined(v) || (boolean && !truthy(v))) return a.empty() ? json("") : a[0];
    return v;
  }
  if (f == "list") {
    if (v.is_array()) return v;
    if (v.is_string()) {
      json r = json::array();
      for (auto& cp : code_points(v.get<std::string>())) r.push_back(cp);
      return r;
    }
    if (v.is_object()) {
      json r = json::array();
      for (const auto& [k, x] : v.items()) r.push_back(k);
      return r;
    }
    fail(line, "list of a " + type_name(v));
  }
  if (f == "first" || f == "last") {
    if (v.is_array()) return v.empty() ? kUndefined : (f == "first" ? v.front() : v.back());
    if (v.is_string()) {
      const auto cps = code_points(v.get<std::string>());
      return cps.empty() ? kUndefined : json(f == "first" ? cps.front() : cps.back());
    }
    fail(line, f + " of a " + type_name(v));
  }
  if (f == "reverse") {
    if (v.is_string()) {
      auto cps = code_points(v.get<std::string>());
      std::string r;
      for (auto it = cps.rbegin(); it != cps.rend(); ++it) r += *it;
      return r;
    }
    if (v.is_array()) {
      json r = json::array();
      for (auto it = v.rbegin(); it != v.rend(); ++it) r.push_back(*it);
      return r;
    }
    fail(line, "reverse of a " + type_name(v));
  }
  if (f == "join") {
    const std::string sep = a.empty() ? "" : str(a[0]);
    std::string r;
    if (!v.is_array()) fail(line, "join of a " + type_name(v));
    for (size_t i = 0; i < v.size(); ++i) r += (i ? sep : "") + str(v[i]);
    return r;
  }
  if (f == "items") {
    if (!v.is_object()) fail(line, "items of a " + type_name(v));
    json r = json::array();
    for (const auto& [k, x] : v.items()) r.push_back(json::array({k, x}));
    return r;
  }
  if (f == "int") {
    if (v.is_number()) return int64_t(v.get<double>());
    try {
      return int64_t(std::stoll(str(v)));
    } catch (...) {
      return a.empty() ? json(0) : a[0];
    }
  }
  if (f == "selectattr" || f == "rejectattr") {
    if (!v.is_array()) fail(line, f + " of a " + type_name(v));
    if (a.empty() || !a[0].is_string()) fail(line, f + "() needs an attribute name");
    json r = json::array();
    for (const json& x : v) {
      const json attr = item(x, a[0], line);
      bool ok;
      if (a.size() < 2) ok = truthy(attr);
      else ok = apply_test(str(a[1]), attr, std::vector<json>(a.begin() + 2, a.end()), line);
      if (ok == (f == "selectattr")) r.push_back(x);
    }
    return r;
  }
  if (f == "select" || f == "reject") {
    // Items of a list, characters of a string, keys of a dict; by a test's name (with
    // its arguments after it), or by truthiness without one.
    json items = json::array();
    if (v.is_array()) items = v;
    else if (v.is_string()) for (auto& cp : code_points(v.get<std::string>())) items.push_back(cp);
    else if (v.is_object()) for (const auto& [k, x] : v.items()) items.push_back(k);
    else if (!undefined(v)) fail(line, f + " of a " + type_name(v));
    if (!a.empty() && !a[0].is_string()) fail(line, f + "() needs the name of a test");
    json r = json::array();
    for (const json& x : items) {
      const bool ok = a.empty() ? truthy(x)
                                : apply_test(str(a[0]), x, std::vector<json>(a.begin() + 1, a.end()), line);
      if (ok == (f == "select")) r.push_back(x);
    }
    return r;
  }
  if (f == "map") {
    if (!v.is_array()) fail(line, "map of a " + type_name(v));
    const json attr = kwarg("attribute", kUndefined);
    if (!attr.is_string()) fail(line, "map() is supported with attribute= only");
    json r = json::array();
    for (const json& x : v) r.push_back(item(x, attr, line));
    return r;
  }
  if (f == "safe" || f == "e" || f == "escape") return f == "safe" ? v : json(str(v));
  fail(line, "the filter '" + f + "' is not supported");
}

bool apply_test(const std::string& t, const json& v, const std::vector<json>& a, int line) {
  if (t == "defined") return !undefined(v);
  if (t == "undefined") return undefined(v);
  if (t == "none") return v.is_null();
  if (t == "string") return v.is_string();
  if (t == "number") return v.is_number() || v.is_boolean();  // Python's bool is a number
  if (t == "integer") return v.is_number_integer();
  if (t == "float") return v.is_number_float();
  if (t == "boolean") return v.is_boolean();
  if (t == "true") return v.is_boolean() && v.get<bool>();
  if (t == "false") return v.is_boolean() && !v.get<bool>();
  if (t == "mapping") return v.is_object();
  if (t == "sequence" || t == "iterable") return v.is_array() || v.is_string() || v.is_object();
  if (t == "equalto" || t == "eq" || t == "sameas" || t == "==") {
    if (a.empty()) fail(line, "'" + t + "' needs a value");
    return equal(v, a[0]);
  }
  if (t == "ne" || t == "!=") {
    if (a.empty()) fail(line, "'" + t + "' needs a value");
    return !equal(v, a[0]);
  }
  if (t == "in") {  // as the `in` operator
    if (a.empty()) fail(line, "'in' needs a container");
    const json& c = a[0];
    if (c.is_string()) return c.get<std::string>().find(str(v)) != std::string::npos;
    if (c.is_array())
      return std::any_of(c.begin(), c.end(), [&](const json& x) { return equal(x, v); });
    if (c.is_object()) return v.is_string() && c.contains(v.get<std::string>());
    fail(line, "'in' needs a string, list or mapping, got " + type_name(c));
  }
  if (t == "odd" || t == "even") {
    const int64_t x = as_int(v, line, t.c_str());
    return (x % 2 != 0) == (t == "odd");
  }
  if (t == "divisibleby") {
    if (a.empty()) fail(line, "'divisibleby' needs a value");
    const int64_t d = as_int(a[0], line, "divisibleby");
    return d != 0 && as_int(v, line, "divisibleby") % d == 0;
  }
  fail(line, "the test '" + t + "' is not supported");
}

}  // namespace vc::server::jinja
