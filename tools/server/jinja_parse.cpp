// Parser of the Jinja subset (jinja.hpp): the lexer's tags (jinja_lex.hpp) ->
// jinja_ast.hpp.
#include <cctype>
#include <string_view>

#include "tools/server/jinja.hpp"
#include "tools/server/jinja_ast.hpp"
#include "tools/server/jinja_lex.hpp"

namespace vc::server::jinja {

namespace {

using json = nlohmann::ordered_json;

// Recursive descent over one tag's tokens.
class ExprParser {
 public:
  ExprParser(const std::vector<Token>& t, int line) : t_(t), line_(line) {}

  const Token& peek(size_t k = 0) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  bool at_end() const { return peek().type == Token::Type::end; }
  bool is_op(const char* op, size_t k = 0) const {
    return peek(k).type == Token::Type::op && peek(k).text == op;
  }
  bool is_name(const char* n, size_t k = 0) const {
    return peek(k).type == Token::Type::name && peek(k).text == n;
  }
  void expect_op(const char* op) {
    if (!is_op(op)) fail(line_, std::string("expected '") + op + "', got '" + peek().text + "'");
    ++i_;
  }
  std::string expect_name() {
    if (peek().type != Token::Type::name) fail(line_, "expected a name, got '" + peek().text + "'");
    return t_[i_++].text;
  }
  void expect_end() {
    if (!at_end()) fail(line_, "unexpected '" + peek().text + "'");
  }

  ExprPtr expression() {
    ExprPtr e = or_expr();
    while (is_name("if")) {
      ++i_;
      auto c = make(Expr::Kind::cond);
      c->items.push_back(std::move(e));
      c->items.push_back(or_expr());
      if (is_name("else")) {
        ++i_;
        c->items.push_back(expression());
      } else {
        c->items.push_back(nullptr);
      }
      e = std::move(c);
    }
    return e;
  }
  ExprPtr or_expr() {
    ExprPtr e = and_expr();
    while (is_name("or")) {
      ++i_;
      e = binary("or", std::move(e), and_expr());
    }
    return e;
  }
  ExprPtr and_expr() {
    ExprPtr e = not_expr();
    while (is_name("and")) {
      ++i_;
      e = binary("and", std::move(e), not_expr());
    }
    return e;
  }
  ExprPtr not_expr() {
    if (is_name("not")) {
      ++i_;
      auto u = make(Expr::Kind::unary);
      u->name = "not";
      u->items.push_back(not_expr());
      return u;
    }
    return compare();
  }
  ExprPtr compare() {
    ExprPtr e = math1();
    for (;;) {
      static const char* ops[] = {"==", "!=", "<", ">", "<=", ">="};
      std::string op;
      for (const char* o : ops)
        if (is_op(o)) op = o;
      if (!op.empty()) {
        ++i_;
      } else if (is_name("in")) {
        ++i_;
        op = "in";
      } else if (is_name("not") && is_name("in", 1)) {
        i_ += 2;
        op = "not in";
      } else {
        return e;
      }
      e = binary(op, std::move(e), math1());
    }
  }
  ExprPtr math1() {
    ExprPtr e = concat();
    while (is_op("+") || is_op("-")) {
      const std::string op = t_[i_++].text;
      e = binary(op, std::move(e), concat());
    }
    return e;
  }
  ExprPtr concat() {
    ExprPtr e = math2();
    while (is_op("~")) {
      ++i_;
      e = binary("~", std::move(e), math2());
    }
    return e;
  }
  ExprPtr math2() {
    ExprPtr e = unary();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const std::string op = t_[i_++].text;
      e = binary(op, std::move(e), unary());
    }
    return e;
  }
  ExprPtr unary() {
    if (is_op("-")) {
      ++i_;
      auto u = make(Expr::Kind::unary);
      u->name.assign(1, '-');  // (assign: GCC 12 warns falsely on = "-")
      u->items.push_back(postfix(primary()));
      return filters(std::move(u));
    }
    return filters(postfix(primary()));
  }
  ExprPtr primary() {
    const Token& t = peek();
    if (t.type == Token::Type::string) {
      std::string s;
      while (peek().type == Token::Type::string) s += t_[i_++].text;  // adjacent literals
      return literal(json(s));
    }
    if (t.type == Token::Type::integer || t.type == Token::Type::number) {
      ++i_;
      return literal(t.value);
    }
    if (t.type == Token::Type::name) {
      ++i_;
      if (t.text == "true" || t.text == "True") return literal(json(true));
      if (t.text == "false" || t.text == "False") return literal(json(false));
      if (t.text == "none" || t.text == "None") return literal(json(nullptr));
      auto n = make(Expr::Kind::name);
      n->name = t.text;
      return n;
    }
    if (is_op("(")) {
      ++i_;
      ExprPtr e = expression();
      expect_op(")");
      return e;
    }
    if (is_op("[")) {
      ++i_;
      auto l = make(Expr::Kind::list);
      while (!is_op("]")) {
        l->items.push_back(expression());
        if (!is_op(",")) break;
        ++i_;
      }
      expect_op("]");
      return l;
    }
    if (is_op("{")) {
      ++i_;
      auto d = make(Expr::Kind::dict);
      while (!is_op("}")) {
        d->items.push_back(expression());
        expect_op(":");
        d->items.push_back(expression());
        if (!is_op(",")) break;
        ++i_;
      }
      expect_op("}");
      return d;
    }
    fail(line_, "unexpected '" + t.text + "' in an expression");
  }
  void call_args(Expr& e) {
    expect_op("(");
    while (!is_op(")")) {
      if (peek().type == Token::Type::name && is_op("=", 1)) {
        std::string k = expect_name();
        ++i_;
        e.kwargs.emplace_back(std::move(k), expression());
      } else {
        e.items.push_back(expression());
      }
      if (!is_op(",")) break;
      ++i_;
    }
    expect_op(")");
  }
  ExprPtr postfix(ExprPtr e) {
    for (;;) {
      if (is_op(".")) {
        ++i_;
        auto a = make(Expr::Kind::attr);
        a->name = expect_name();
        a->items.push_back(std::move(e));
        e = std::move(a);
      } else if (is_op("[")) {
        ++i_;
        ExprPtr parts[3];
        int n = 0;
        bool sliced = false;
        for (;;) {
          if (!is_op(":") && !is_op("]")) parts[n] = expression();
          if (is_op(":") && n < 2) {
            ++i_;
            ++n;
            sliced = true;
            continue;
          }
          break;
        }
        expect_op("]");
        auto x = make(sliced ? Expr::Kind::slice : Expr::Kind::index);
        x->items.push_back(std::move(e));
        if (!sliced && !parts[0]) fail(line_, "empty subscript");
        for (int k = 0; k < (sliced ? 3 : 1); ++k) x->items.push_back(std::move(parts[k]));
        e = std::move(x);
      } else if (is_op("(")) {
        auto c = make(Expr::Kind::call);
        c->items.push_back(std::move(e));
        call_args(*c);
        e = std::move(c);
      } else {
        return e;
      }
    }
  }
  ExprPtr filters(ExprPtr e) {
    for (;;) {
      if (is_op("|")) {
        ++i_;
        auto f = make(Expr::Kind::filter);
        f->name = expect_name();
        f->items.push_back(std::move(e));
        if (is_op("(")) call_args(*f);
        e = std::move(f);
      } else if (is_name("is")) {
        ++i_;
        auto t = make(Expr::Kind::test);
        if (is_name("not")) {
          ++i_;
          t->negated = true;
        }
        t->name = expect_name();
        t->items.push_back(std::move(e));
        if (is_op("(")) {
          call_args(*t);
        } else if (t->name == "equalto" || t->name == "eq" || t->name == "sameas" ||
                   t->name == "divisibleby") {
          t->items.push_back(postfix(primary()));
        }
        e = std::move(t);
      } else {
        return e;
      }
    }
  }

  size_t pos() const { return i_; }
  void skip(size_t n) { i_ += n; }

 private:
  ExprPtr make(Expr::Kind k) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = line_;
    return e;
  }
  ExprPtr literal(json v) {
    auto e = make(Expr::Kind::literal);
    e->value = std::move(v);
    return e;
  }
  ExprPtr binary(const std::string& op, ExprPtr a, ExprPtr b) {
    auto e = make(Expr::Kind::binary);
    e->name = op;
    e->items.push_back(std::move(a));
    e->items.push_back(std::move(b));
    return e;
  }
  const std::vector<Token>& t_;
  size_t i_ = 0;
  int line_;
};

// Builds statement bodies from the tag list.
class StmtParser {
 public:
  explicit StmtParser(std::vector<Tag> tags) : tags_(std::move(tags)) {}

  // Parses until one of `stops` (a block keyword); returns which one ended it.
  std::string body(Body& out, std::initializer_list<const char*> stops) {
    while (i_ < tags_.size()) {
      Tag& t = tags_[i_++];
      auto node = std::make_unique<Node>();
      node->line = t.line;
      if (t.type == Tag::Type::text) {
        node->kind = Node::Kind::text;
        node->text = t.text;
        out.push_back(std::move(node));
        continue;
      }
      ExprParser p(t.tokens, t.line);
      if (t.type == Tag::Type::output) {
        node->kind = Node::Kind::output;
        node->expr = p.expression();
        p.expect_end();
        out.push_back(std::move(node));
        continue;
      }
      const std::string kw = p.expect_name();
      for (const char* s : stops)
        if (kw == s) {
          current_ = &t;
          return kw;
        }
      if (kw == "if") {
        node->kind = Node::Kind::if_;
        ExprPtr cond = p.expression();
        p.expect_end();
        for (;;) {
          Body b;
          const std::string end = body(b, {"elif", "else", "endif"});
          node->branches.emplace_back(std::move(cond), std::move(b));
          if (end == "endif") break;
          ExprParser q(current_->tokens, current_->line);
          (void)q.expect_name();
          if (end == "elif") {
            cond = q.expression();
          } else {
            cond = nullptr;
          }
          q.expect_end();
          if (end == "else") {
            Body eb;
            if (body(eb, {"endif"}) != "endif") fail(t.line, "'if' is not closed by 'endif'");
            node->branches.emplace_back(nullptr, std::move(eb));
            break;
          }
        }
      } else if (kw == "for") {
        node->kind = Node::Kind::for_;
        node->targets.push_back(p.expect_name());
        while (p.is_op(",")) {
          p.skip(1);
          node->targets.push_back(p.expect_name());
        }
        if (!p.is_name("in")) fail(t.line, "expected 'in' in a for loop");
        p.skip(1);
        node->expr = p.or_expr();
        if (p.is_name("if")) {
          p.skip(1);
          node->filter = p.or_expr();
        }
        if (p.is_name("recursive")) fail(t.line, "recursive loops are not supported");
        p.expect_end();
        const std::string end = body(node->body, {"else", "endfor"});
        if (end == "else" && body(node->else_body, {"endfor"}) != "endfor")
          fail(t.line, "'for' is not closed by 'endfor'");
        if (end.empty()) fail(t.line, "'for' is not closed by 'endfor'");
      } else if (kw == "set") {
        node->kind = Node::Kind::set;
        node->targets.push_back(p.expect_name());
        if (p.is_op(".")) {
          p.skip(1);
          node->targets.push_back(p.expect_name());
        }
        if (!p.is_op("=")) fail(t.line, "block assignments ({% set x %}...{% endset %}) are not supported");
        p.skip(1);
        node->expr = p.expression();
        p.expect_end();
      } else if (kw == "macro") {
        node->kind = Node::Kind::macro;
        node->targets.push_back(p.expect_name());
        parameters(p, *node, t.line, "macro '" + node->targets[0] + "'");
        p.expect_end();
        if (body(node->body, {"endmacro"}) != "endmacro")
          fail(t.line, "'macro' is not closed by 'endmacro'");
      } else if (kw == "call") {
        // {% call [(params)] macro(args) %}body{% endcall %}: the macro's caller()
        // renders the body, its arguments bound to the params.
        node->kind = Node::Kind::call_block;
        node->targets.push_back("caller");
        if (p.is_op("(")) parameters(p, *node, t.line, "the call block's caller");
        node->expr = p.expression();
        if (node->expr->kind != Expr::Kind::call || node->expr->items[0]->kind != Expr::Kind::name)
          fail(t.line, "a call block must call a macro by its name");
        p.expect_end();
        if (body(node->body, {"endcall"}) != "endcall")
          fail(t.line, "'call' is not closed by 'endcall'");
      } else if (kw == "elif" || kw == "else" || kw == "endif" || kw == "endfor" ||
                 kw == "endmacro" || kw == "endcall") {
        fail(t.line, "'" + kw + "' without a matching opening tag");
      } else {
        fail(t.line, "the tag '" + kw + "' is not supported by this Jinja subset");
      }
      out.push_back(std::move(node));
    }
    if (stops.size() > 0) fail(tags_.empty() ? 0 : tags_.back().line,
                               "the template ends inside a block (missing '" +
                                   std::string(*stops.begin() == std::string("else") ||
                                                       *stops.begin() == std::string("elif")
                                                   ? "endif/endfor"
                                                   : *stops.begin()) +
                                   "')");
    return "";
  }

 private:
  // "(a, b=default, ...)" into node.targets (after its name) and node.defaults.
  static void parameters(ExprParser& p, Node& node, int line, const std::string& what) {
    p.expect_op("(");
    while (!p.is_op(")")) {
      node.targets.push_back(p.expect_name());
      ExprPtr dflt;
      if (p.is_op("=")) {
        p.skip(1);
        dflt = p.expression();
      } else if (!node.defaults.empty() && node.defaults.back()) {
        fail(line, what + ": the parameter '" + node.targets.back() +
                       "' without a default follows one with a default");
      }
      node.defaults.push_back(std::move(dflt));
      if (!p.is_op(",")) break;
      p.skip(1);
    }
    p.expect_op(")");
  }

  std::vector<Tag> tags_;
  size_t i_ = 0;
  Tag* current_ = nullptr;
};

}  // namespace

Template::Template(const std::string& source) : body_(std::make_unique<Body>()) {
  // jinja2 drops one newline at the end of the source (keep_trailing_newline=False).
  std::string_view s = source;
  if (s.ends_with("\r\n")) s.remove_suffix(2);
  else if (s.ends_with('\n') || s.ends_with('\r')) s.remove_suffix(1);
  StmtParser p(split_tags(s));
  (void)p.body(*body_, {});
}

Template::~Template() = default;
Template::Template(Template&&) noexcept = default;

}  // namespace vc::server::jinja
