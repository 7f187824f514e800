// The filters (`x | name(args)`) and tests (`x is name(args)`) of the Jinja subset
// (jinja.hpp) over its values (jinja_values.hpp), arguments already evaluated.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "tools/server/jinja_values.hpp"

namespace vc::server::jinja {

/// The filter `name` on `v`; throws TemplateError naming `line` for an unknown
/// filter or a value it does not take.
json apply_filter(const std::string& name, const json& v, const std::vector<json>& args,
                  const std::vector<std::pair<std::string, json>>& kwargs, int line);

/// The test `name` on `v`; throws TemplateError naming `line` for an unknown test.
bool apply_test(const std::string& name, const json& v, const std::vector<json>& args, int line);

}  // namespace vc::server::jinja
