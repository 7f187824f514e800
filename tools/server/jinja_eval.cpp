// Rendering of the Jinja subset (jinja.hpp) over JSON values (jinja_values.hpp): a
// namespace() is an object the template may set attributes of; a macro runs with the
// template's top-level variables and its parameters, and returns what it rendered (a
// call block's body runs, by the macro's caller(), where the block stands);
// string methods follow Python where templates depend on it; filters and tests are in
// jinja_filters.cpp.
#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "tools/server/jinja.hpp"
#include "tools/server/jinja_ast.hpp"
#include "tools/server/jinja_filters.hpp"
#include "tools/server/jinja_values.hpp"

namespace vc::server::jinja {

namespace {

class Renderer {
 public:
  explicit Renderer(const json& ctx) { scopes_.push_back(ctx); }

  void run(const Body& body, std::string& out) {
    for (const NodePtr& n : body) exec(*n, out);
  }

 private:
  std::vector<json> scopes_;  // innermost last; objects
  std::map<std::string, const Node*> macros_;  // defined so far
  // Scopes of the sites of the macro calls running now, outermost first.
  std::vector<std::vector<json>> saved_;
  // Call blocks by id (a macro's `caller` is {"__caller__": id}); `saved`: where
  // saved_ holds the scopes of the block's site while its macro runs.
  struct Caller {
    const Node* block;
    size_t saved;
    bool active;
  };
  std::vector<Caller> callers_;
  int macro_depth_ = 0;
  static constexpr int kMaxMacroDepth = 64;

  json lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      const auto f = it->find(name);
      if (f != it->end()) return *f;
    }
    return kUndefined;
  }
  json* find_var(const std::string& name) {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      const auto f = it->find(name);
      if (f != it->end()) return &*f;
    }
    return nullptr;
  }

  void exec(const Node& n, std::string& out) {
    switch (n.kind) {
      case Node::Kind::text: out += n.text; break;
      case Node::Kind::output: out += str(eval(*n.expr)); break;
      case Node::Kind::if_:
        for (const auto& [cond, body] : n.branches)
          if (!cond || truthy(eval(*cond))) {
            run(body, out);
            break;
          }
        break;
      case Node::Kind::set: {
        json v = eval(*n.expr);
        if (n.targets.size() == 1) {
          scopes_.back()[n.targets[0]] = v;
        } else {
          json* ns = find_var(n.targets[0]);
          if (ns == nullptr || !ns->is_object() || !ns->contains("__namespace__"))
            fail(n.line, "'" + n.targets[0] + "' is not a namespace: cannot set attributes of it");
          (*ns)[n.targets[1]] = v;
        }
        break;
      }
      case Node::Kind::for_: loop(n, out); break;
      case Node::Kind::macro: macros_[n.targets[0]] = &n; break;
      case Node::Kind::call_block: call_block(n, out); break;
    }
  }

  // The arguments of call `e` bound to the parameters of `m` (a macro, or a call
  // block's caller: targets[1..] with their defaults): positional ones, then keyword
  // ones, then defaults (the rest are undefined), as jinja2 binds them.
  json bind(const Node& m, const Expr& e, const std::string& what) {
    const size_t params = m.targets.size() - 1;
    if (e.items.size() - 1 > params)
      fail(e.line, what + " takes not more than " + std::to_string(params) +
                       " argument(s), got " + std::to_string(e.items.size() - 1));
    json scope = json::object();
    std::vector<bool> bound(params, false);
    for (size_t i = 1; i < e.items.size(); ++i) {
      scope[m.targets[i]] = eval(*e.items[i]);
      bound[i - 1] = true;
    }
    for (const auto& [k, v] : e.kwargs) {
      const auto at = std::find(m.targets.begin() + 1, m.targets.end(), k);
      if (at == m.targets.end()) fail(e.line, what + " takes no keyword argument '" + k + "'");
      const size_t i = size_t(at - m.targets.begin()) - 1;
      if (bound[i]) fail(e.line, what + " got multiple values for argument '" + k + "'");
      scope[k] = eval(*v);
      bound[i] = true;
    }
    for (size_t i = 0; i < params; ++i)
      if (!bound[i])
        scope[m.targets[i + 1]] = m.defaults[i] ? eval(*m.defaults[i]) : kUndefined;
    return scope;
  }

  // A call of a macro; `caller`: the value of its `caller` variable (a call block's).
  json call_macro(const Node& m, const Expr& e, const json* caller = nullptr) {
    json scope = bind(m, e, "macro '" + m.targets[0] + "'");
    if (caller != nullptr) scope["caller"] = *caller;
    if (macro_depth_ >= kMaxMacroDepth)
      fail(e.line, "macro calls nested deeper than " + std::to_string(kMaxMacroDepth));
    // The body sees the top-level variables and its parameters, not the caller's,
    // whose scopes wait in saved_ (a call block's body runs in them again).
    saved_.push_back(std::move(scopes_));
    scopes_.clear();
    scopes_.push_back(std::move(saved_.back().front()));
    scopes_.push_back(std::move(scope));
    std::string out;
    ++macro_depth_;
    run(m.body, out);
    --macro_depth_;
    saved_.back().front() = std::move(scopes_.front());
    scopes_ = std::move(saved_.back());
    saved_.pop_back();
    return out;
  }

  // {% call [(params)] m(args) %}body{% endcall %}: m runs with a `caller` that
  // renders the body where the block stands.
  void call_block(const Node& n, std::string& out) {
    const Expr& e = *n.expr;
    const auto m = macros_.find(e.items[0]->name);
    if (m == macros_.end()) fail(n.line, "call block: '" + e.items[0]->name + "' is not a macro");
    const size_t id = callers_.size();
    callers_.push_back({&n, saved_.size(), true});  // call_macro saves this site's scopes there
    const json marker = {{"__caller__", id}};
    out += str(call_macro(*m->second, e, &marker));
    callers_[id].active = false;
  }

  // caller(args) inside a macro a call block called: the block's body, in the scopes
  // of the block's site plus its parameters; returns what it rendered.
  json call_caller(const Expr& e) {
    const json c = lookup("caller");
    if (!c.is_object() || !c.contains("__caller__"))
      fail(e.line, "caller() is only defined in a macro called by a call block");
    const Caller frame = callers_.at(c["__caller__"].get<size_t>());  // a copy: callers_ grows
    if (!frame.active) fail(e.line, "caller() used after its call block ended");
    json scope = bind(*frame.block, e, "the call block's caller");
    // The body is a macro of its own, called by no call block (jinja2: "No caller").
    if (!scope.contains("caller")) scope["caller"] = kUndefined;
    if (macro_depth_ >= kMaxMacroDepth)
      fail(e.line, "macro calls nested deeper than " + std::to_string(kMaxMacroDepth));
    std::vector<json> inner = std::move(scopes_);
    scopes_ = std::move(saved_[frame.saved]);
    scopes_.front() = std::move(inner.front());  // the top-level scope travels along
    scopes_.push_back(std::move(scope));
    std::string out;
    ++macro_depth_;
    run(frame.block->body, out);
    --macro_depth_;
    scopes_.pop_back();
    inner.front() = std::move(scopes_.front());
    saved_[frame.saved] = std::move(scopes_);
    scopes_ = std::move(inner);
    return out;
  }

  void loop(const Node& n, std::string& out) {
    const json seq = eval(*n.expr);
    std::vector<json> items;
    if (seq.is_array()) items.assign(seq.begin(), seq.end());
    else if (seq.is_object())
      for (const auto& [k, v] : seq.items()) items.emplace_back(k);
    else if (seq.is_string())
      for (auto& cp : code_points(seq.get<std::string>())) items.emplace_back(cp);
    else if (!undefined(seq) && !seq.is_null())
      fail(n.line, "cannot loop over a " + type_name(seq));
    auto bind = [&](json& scope, const json& x) {
      if (n.targets.size() == 1) {
        scope[n.targets[0]] = x;
        return;
      }
      if (!x.is_array() || x.size() != n.targets.size())
        fail(n.line, "cannot unpack a " + type_name(x) + " into " + std::to_string(n.targets.size()) +
                         " loop variables");
      for (size_t k = 0; k < n.targets.size(); ++k) scope[n.targets[k]] = x[k];
    };
    if (n.filter) {
      std::vector<json> kept;
      for (const json& x : items) {
        scopes_.push_back(json::object());
        bind(scopes_.back(), x);
        const bool keep = truthy(eval(*n.filter));
        scopes_.pop_back();
        if (keep) kept.push_back(x);
      }
      items.swap(kept);
    }
    const size_t len = items.size();
    for (size_t i = 0; i < len; ++i) {
      json scope = json::object();
      bind(scope, items[i]);
      scope["loop"] = {{"index0", i},          {"index", i + 1},
                       {"revindex0", len - 1 - i}, {"revindex", len - i},
                       {"first", i == 0},      {"last", i + 1 == len},
                       {"length", len},
                       {"previtem", i > 0 ? items[i - 1] : kUndefined},
                       {"nextitem", i + 1 < len ? items[i + 1] : kUndefined}};
      scopes_.push_back(std::move(scope));
      run(n.body, out);
      scopes_.pop_back();
    }
    if (len == 0) run(n.else_body, out);
  }

  std::vector<json> args(const Expr& e, size_t from) {
    std::vector<json> a;
    for (size_t i = from; i < e.items.size(); ++i) a.push_back(eval(*e.items[i]));
    return a;
  }
  json kwarg(const Expr& e, const std::string& name, const json& dflt) {
    for (const auto& [k, v] : e.kwargs)
      if (k == name) return eval(*v);
    return dflt;
  }

  json eval(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::literal: return e.value;
      case Expr::Kind::name: return lookup(e.name);
      case Expr::Kind::list: {
        json l = json::array();
        for (const auto& x : e.items) l.push_back(eval(*x));
        return l;
      }
      case Expr::Kind::dict: {
        json d = json::object();
        for (size_t i = 0; i + 1 < e.items.size(); i += 2) d[str(eval(*e.items[i]))] = eval(*e.items[i + 1]);
        return d;
      }
      case Expr::Kind::attr: {
        const json v = eval(*e.items[0]);
        if (undefined(v)) fail(e.line, "'" + e.name + "' of an undefined value");
        return item(v, json(e.name), e.line);
      }
      case Expr::Kind::index: return item(eval(*e.items[0]), eval(*e.items[1]), e.line);
      case Expr::Kind::slice: {
        auto part = [&](size_t k) { return e.items[k] ? eval(*e.items[k]) : json(nullptr); };
        return sequence_slice(eval(*e.items[0]), part(1), part(2), part(3), e.line);
      }
      case Expr::Kind::call: return call(e);
      case Expr::Kind::filter: return filter(e);
      case Expr::Kind::test: return test(e) != e.negated;
      case Expr::Kind::unary: {
        const json v = eval(*e.items[0]);
        if (e.name == "not") return !truthy(v);
        if (v.is_number_integer()) return -v.get<int64_t>();
        return -as_number(v, e.line);
      }
      case Expr::Kind::binary: return binary(e);
      case Expr::Kind::cond: {
        if (truthy(eval(*e.items[1]))) return eval(*e.items[0]);
        return e.items[2] ? eval(*e.items[2]) : kUndefined;
      }
    }
    return kUndefined;
  }

  json binary(const Expr& e) {
    const std::string& op = e.name;
    if (op == "and") {
      json a = eval(*e.items[0]);
      return truthy(a) ? eval(*e.items[1]) : a;
    }
    if (op == "or") {
      json a = eval(*e.items[0]);
      return truthy(a) ? a : eval(*e.items[1]);
    }
    const json a = eval(*e.items[0]), b = eval(*e.items[1]);
    if (op == "==") return equal(a, b);
    if (op == "!=") return !equal(a, b);
    if (op == "~") return str(a) + str(b);
    if (op == "in" || op == "not in") {
      bool found = false;
      if (b.is_string()) found = b.get<std::string>().find(str(a)) != std::string::npos;
      else if (b.is_array()) found = std::any_of(b.begin(), b.end(), [&](const json& x) { return equal(x, a); });
      else if (b.is_object()) found = a.is_string() && b.contains(a.get<std::string>());
      else fail(e.line, "'in' needs a string, list or mapping on its right, got " + type_name(b));
      return op == "in" ? found : !found;
    }
    if (undefined(a) || undefined(b)) fail(e.line, "'" + op + "' with an undefined value");
    if (op == "+") {
      if (a.is_string() && b.is_string()) return a.get<std::string>() + b.get<std::string>();
      if (a.is_array() && b.is_array()) {
        json r = a;
        for (const auto& x : b) r.push_back(x);
        return r;
      }
      if (a.is_string() || b.is_string())
        fail(e.line, "cannot add a " + type_name(a) + " and a " + type_name(b));
    }
    if (op == "<" || op == ">" || op == "<=" || op == ">=") {
      int c;
      if (a.is_string() && b.is_string()) c = a.get<std::string>().compare(b.get<std::string>());
      else {
        const double x = as_number(a, e.line), y = as_number(b, e.line);
        c = x < y ? -1 : x > y ? 1 : 0;
      }
      if (op == "<") return c < 0;
      if (op == ">") return c > 0;
      if (op == "<=") return c <= 0;
      return c >= 0;
    }
    const bool ints = a.is_number_integer() && b.is_number_integer();
    if (ints && op != "/") {
      const int64_t x = a.get<int64_t>(), y = b.get<int64_t>();
      if (op == "+") return x + y;
      if (op == "-") return x - y;
      if (op == "*") return x * y;
      if (y == 0) fail(e.line, "division by zero");
      if (op == "//") return int64_t(std::floor(double(x) / double(y)));
      if (op == "%") return ((x % y) + y) % y;
    }
    const double x = as_number(a, e.line), y = as_number(b, e.line);
    if (op == "+") return x + y;
    if (op == "-") return x - y;
    if (op == "*") return x * y;
    if (y == 0) fail(e.line, "division by zero");
    if (op == "/") return x / y;
    if (op == "//") return std::floor(x / y);
    if (op == "%") return x - y * std::floor(x / y);
    fail(e.line, "unknown operator '" + op + "'");
  }

  json call(const Expr& e) {
    const Expr& target = *e.items[0];
    if (target.kind == Expr::Kind::name) {
      if (target.name == "caller") return call_caller(e);
      if (const auto m = macros_.find(target.name); m != macros_.end())
        return call_macro(*m->second, e);
      const std::vector<json> a = args(e, 1);
      if (target.name == "raise_exception")
        throw RaisedError(a.empty() ? "raise_exception() called" : str(a[0]));
      if (target.name == "namespace") {
        json ns = {{"__namespace__", true}};
        for (const auto& [k, v] : e.kwargs) ns[k] = eval(*v);
        return ns;
      }
      if (target.name == "range") {
        int64_t lo = 0, hi = 0, step = 1;
        if (a.size() == 1) hi = as_int(a[0], e.line, "range");
        else if (a.size() >= 2) {
          lo = as_int(a[0], e.line, "range");
          hi = as_int(a[1], e.line, "range");
          if (a.size() == 3) step = as_int(a[2], e.line, "range");
        }
        if (step == 0) fail(e.line, "range() step cannot be zero");
        json r = json::array();
        for (int64_t i = lo; step > 0 ? i < hi : i > hi; i += step) r.push_back(i);
        return r;
      }
      fail(e.line, "the function '" + target.name + "' is not supported");
    }
    if (target.kind != Expr::Kind::attr) fail(e.line, "this call is not supported");
    const json self = eval(*target.items[0]);
    const std::string& m = target.name;
    const std::vector<json> a = args(e, 1);
    if (self.is_string()) {
      const std::string s = self.get<std::string>();
      auto arg_str = [&](size_t i) {
        if (i >= a.size() || !a[i].is_string()) fail(e.line, m + "() needs a string argument");
        return a[i].get<std::string>();
      };
      if (m == "strip" || m == "lstrip" || m == "rstrip") {
        const std::string chars = a.empty() || a[0].is_null() ? kSpace : arg_str(0);
        return strip_chars(s, chars, m != "rstrip", m != "lstrip");
      }
      if (m == "startswith") return s.starts_with(arg_str(0));
      if (m == "endswith") return s.ends_with(arg_str(0));
      if (m == "upper" || m == "lower") {
        std::string r = s;
        for (char& c : r) c = char(m == "upper" ? std::toupper(c) : std::tolower(c));
        return r;
      }
      if (m == "replace") {
        const std::string from = arg_str(0), to = arg_str(1);
        if (from.empty()) return s;
        std::string r;
        size_t pos = 0, at;
        while ((at = s.find(from, pos)) != std::string::npos) {
          r += s.substr(pos, at - pos) + to;
          pos = at + from.size();
        }
        return r + s.substr(pos);
      }
      if (m == "split") {
        json r = json::array();
        if (a.empty() || a[0].is_null()) {
          size_t i = 0;
          while (i < s.size()) {
            while (i < s.size() && kSpace.find(s[i]) != std::string::npos) ++i;
            size_t j = i;
            while (j < s.size() && kSpace.find(s[j]) == std::string::npos) ++j;
            if (j > i) r.push_back(s.substr(i, j - i));
            i = j;
          }
          return r;
        }
        const std::string sep = arg_str(0);
        if (sep.empty()) fail(e.line, "split() with an empty separator");
        size_t pos = 0, at;
        while ((at = s.find(sep, pos)) != std::string::npos) {
          r.push_back(s.substr(pos, at - pos));
          pos = at + sep.size();
        }
        r.push_back(s.substr(pos));
        return r;
      }
    }
    if (self.is_object()) {
      if (m == "get") {
        if (a.empty()) fail(e.line, "get() needs a key");
        const json v = item(self, a[0], e.line);
        return undefined(v) ? (a.size() > 1 ? a[1] : json(nullptr)) : v;
      }
      if (m == "items") {
        json r = json::array();
        for (const auto& [k, v] : self.items())
          if (k != "__namespace__") r.push_back(json::array({k, v}));
        return r;
      }
      if (m == "keys" || m == "values") {
        json r = json::array();
        for (const auto& [k, v] : self.items())
          if (k != "__namespace__") r.push_back(m == "keys" ? json(k) : v);
        return r;
      }
    }
    fail(e.line, "the method '" + m + "' of a " + type_name(self) + " is not supported");
  }

  json filter(const Expr& e) {
    const json v = eval(*e.items[0]);
    std::vector<std::pair<std::string, json>> kwargs;
    for (const auto& [k, x] : e.kwargs) kwargs.emplace_back(k, eval(*x));
    return apply_filter(e.name, v, args(e, 1), kwargs, e.line);
  }

  bool test(const Expr& e) {
    const json v = eval(*e.items[0]);
    return apply_test(e.name, v, args(e, 1), e.line);
  }
};

}  // namespace

std::string Template::render(const json& context) const {
  if (!context.is_object()) throw TemplateError("chat template: the context must be an object");
  Renderer r(context);
  std::string out;
  r.run(*body_, out);
  return out;
}

}  // namespace vc::server::jinja
