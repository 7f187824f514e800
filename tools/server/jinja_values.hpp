// Values of the Jinja subset and their Python semantics, shared by the renderer
// (jinja_eval.cpp): values are JSON objects that keep insertion order, as Python's
// dicts do (so `tojson` and `.items()` follow the request's key order), "undefined"
// is a discarded JSON value; truthiness, str() and repr(), json.dumps, indices and
// slices by code point.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace vc::server::jinja {

using json = nlohmann::ordered_json;

inline const json kUndefined = json(json::value_t::discarded);
inline const std::string kSpace = " \t\n\r\f\v";

inline bool undefined(const json& v) { return v.is_discarded(); }

/// Throws TemplateError "chat template line LINE: WHAT".
[[noreturn]] void fail(int line, const std::string& what);
/// UTF-8 code points of a string (Python indexes strings by them).
std::vector<std::string> code_points(const std::string& s);
std::string type_name(const json& v);
/// Python's truthiness.
bool truthy(const json& v);
std::string py_float(double d);
/// Python's str() and repr().
std::string str(const json& v);
std::string repr(const json& v);
/// Python's json.dumps(ensure_ascii=False) with its default separators; with
/// `indent` >= 0, its indented form (json.dumps(..., indent=N)).
std::string to_json(const json& v, int indent = -1);
int64_t as_int(const json& v, int line, const char* what);
double as_number(const json& v, int line);
/// v[a:b:c] of a string or list, Python's rules.
json sequence_slice(const json& v, const json& a, const json& b, const json& c, int line);
/// v[key] of a list (negative indices), object or string.
json item(const json& v, const json& key, int line);
std::string strip_chars(const std::string& s, const std::string& chars, bool left, bool right);
/// Python's ==: undefined equals only undefined, mappings regardless of key order.
bool equal(const json& a, const json& b);

}  // namespace vc::server::jinja
