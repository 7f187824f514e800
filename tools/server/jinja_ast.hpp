// The syntax tree of the Jinja subset chat templates use (jinja.hpp): statements
// (text, output, if/elif/else, for with loop variables and else, set, set of a
// namespace attribute, macro definitions, call blocks) and expressions (literals, names, attribute and item access,
// slices, calls, filters, tests, unary and binary operators, conditional
// expressions). Built by jinja_parse.cpp, run by jinja_eval.cpp.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace vc::server::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    literal,    // value
    name,       // name
    list,       // items
    dict,       // keys (literal exprs in items[0..n) as pairs)
    attr,       // items[0] . name
    index,      // items[0] [ items[1] ]
    slice,      // items[0] [ items[1] : items[2] : items[3] ] (null parts allowed)
    call,       // items[0] ( items[1..], kwargs )
    filter,     // items[0] | name ( items[1..], kwargs )
    test,       // items[0] is [not] name ( items[1..] )  (negated)
    unary,      // op items[0]: "not", "-"
    binary,     // items[0] op items[1]
    cond,       // items[0] if items[1] else items[2] (items[2] may be null)
  };
  Kind kind = Kind::literal;
  nlohmann::ordered_json value;       // literal
  std::string name;                   // name, attr, call target name, filter, test, op
  std::vector<ExprPtr> items;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  bool negated = false;               // test: "is not"
  int line = 0;
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Node {
  enum class Kind { text, output, if_, for_, set, macro, call_block };
  Kind kind = Kind::text;
  std::string text;                            // text
  ExprPtr expr;                                // output; set value; for iterable
  std::vector<std::pair<ExprPtr, Body>> branches;  // if: (condition or null for else, body)
  std::vector<std::string> targets;            // for: loop variable(s); set: name [, attribute];
                                               // macro: name, then its parameters;
                                               // call_block: "caller", then its parameters
  std::vector<ExprPtr> defaults;               // macro, call_block: per parameter, its
                                               // default or null
                                               // (call_block: expr is the macro call)
  ExprPtr filter;                              // for ... if filter
  Body body, else_body;                        // for; macro: body
  int line = 0;
};

}  // namespace vc::server::jinja
