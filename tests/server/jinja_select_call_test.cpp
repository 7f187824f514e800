// The select / reject filters (with and without a test, over lists, strings, dicts
// and undefined) and call blocks with caller() (arguments, defaults, the block's own
// scope, nesting) render as Python's jinja2 3.1.6 renders them (the expected texts
// were made by ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
// .from_string(SRC).render(**context) with the context below). The chat template
// built from them (tests/data/chat_templates/call_blocks.jinja) is compared with
// jinja2 over every conversation in chat_template_test.cpp.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/server/jinja.hpp"

namespace vc::server {
namespace {

using ordered = nlohmann::ordered_json;

const ordered kContext = ordered::parse(R"({"messages": [{"role": "system", "content": "S"},
    {"role": "user", "content": null}, {"role": "user", "content": "hi"}], "name": "Ann"})");

std::string render(const std::string& src) { return jinja::Template(src).render(kContext); }

std::string error_of(const std::string& src) {
  try {
    (void)render(src);
  } catch (const jinja::TemplateError& e) {
    return e.what();
  }
  return "(rendered)";
}

TEST(jinja_select_and_call, render_as_python_jinja2_does) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{{ [0, 1, '', 'a', none, [], [2]] | select | list }}",
       "[1, 'a', [2]]"},
      {"{{ [1, 2, 3, 4, 5] | select('odd') | list }}|{{ [1, 2, 3, 4, 5] | reject('odd') | join(',') }}",
       "[1, 3, 5]|2,4"},
      {"{{ [1, none, 2] | reject('none') | list }}|{{ [1, none, 2] | select('none') | list }}",
       "[1, 2]|[None]"},
      {"{{ [x, 1, y] | select('defined') | list }}|{{ [x, 1] | reject('defined') | list | length }}",
       "[1]|1"},
      {"{{ [1, 4, 6, 9] | select('divisibleby', 3) | list }}|{{ ['a', 'b', 'a'] | select('equalto', 'a') | list | length }}",
       "[6, 9]|2"},
      {"{{ 'abcab' | select('eq', 'a') | join }}|{{ {'a': 1, 'b': 0} | select | list }}|{{ nothing | select | list }}",
       "aa|['a', 'b']|[]"},
      {"{{ messages | map(attribute='content') | select('string') | list }}|{{ messages | map(attribute='role') | reject('in', ['system']) | list }}",
       "['S', 'hi']|['user', 'user']"},
      {"{{ [1, 'x', 2.5, true] | select('number') | list }}|{{ ['a', 'b'] | reject('ne', 'a') | list }}",
       "[1, 2.5, True]|['a']"},
      {"{% for m in messages | selectattr('content') %}{{ m.role }};{% endfor %}{{ messages | rejectattr('content', 'none') | map(attribute='content') | join }}",
       "system;user;Shi"},
      {"{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}hi {{ name }}{% endcall %}",
       "<b>hi Ann</b>"},
      {"{% macro each(items) %}{% for i in items %}{{ caller(i, loop.index) }}{% endfor %}{% endmacro %}{% call(x, n=0) each(['p', 'q']) %}[{{ n }}:{{ x }}]{% endcall %}",
       "[1:p][2:q]"},
      {"{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% for m in ['a', 'b'] %}{% call wrap('i') %}{{ m }}{{ loop.index }}{% endcall %}{% endfor %}",
       "<i>a1</i><i>b2</i>"},
      {"{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('o') %}{% call wrap('i') %}x{% endcall %}{% endcall %}",
       "<o><i>x</i></o>"},
      {"{% macro twice() %}{{ caller() }}{{ caller() }}{% endmacro %}{% call twice() %}-{% endcall %}",
       "--"},
      {"{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% set v = 1 %}{% call wrap('p') %}{% set v = 2 %}{{ v }}{% endcall %}{{ v }}",
       "<p>2</p>1"},
      {"{% macro twice() %}{{ caller() }}{{ caller() }}{% endmacro %}{% set ns = namespace(c=0) %}{% call twice() %}{% set ns.c = ns.c + 1 %}{% endcall %}{{ ns.c }}",
       "2"},
      {"{% macro m(a, b='B') %}({{ a }}{{ b }}{{ caller(k='K') }}){% endmacro %}{% call(j='J', k='k') m('A') %}{{ j }}{{ k }}{% endcall %}",
       "(ABJK)"},
      {"{% macro outer() %}[{{ caller() }}]{% endmacro %}{% macro inner() %}{% call outer() %}in{% endcall %}{% endmacro %}{{ inner() }}",
       "[in]"},
      {"{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}\n{% call wrap('t') %}\n  line\n{% endcall %}\nend",
       "<t>  line\n</t>end"},
  };
  for (const auto& [src, want] : cases) EXPECT_EQ(render(src), want) << src;
}

TEST(jinja_select_and_call, misuse_fails_naming_the_problem) {
  EXPECT_NE(error_of("{{ 5 | select | list }}").find("select of a"), std::string::npos);
  EXPECT_NE(error_of("{{ [1] | reject('nonsense') | list }}").find("the test 'nonsense'"),
            std::string::npos);
  // caller() outside a macro a call block called, and inside the block's own body
  // (jinja2: "No caller defined").
  EXPECT_NE(error_of("{% macro m() %}{{ caller() }}{% endmacro %}{{ m() }}").find("call block"),
            std::string::npos);
  EXPECT_NE(error_of("{% macro w() %}{{ caller() }}{% endmacro %}{% macro use() %}{% call w() %}"
                     "{{ caller() }}{% endcall %}{% endmacro %}{% call use() %}deep{% endcall %}")
                .find("call block"),
            std::string::npos);
  EXPECT_NE(error_of("{% call nope() %}x{% endcall %}").find("'nope' is not a macro"),
            std::string::npos);
  EXPECT_NE(error_of("{% macro m() %}{% endmacro %}{% call m() %}x").find("endcall"),
            std::string::npos);
  EXPECT_NE(error_of("{% macro m() %}{{ caller(1, 2) }}{% endmacro %}{% call(a) m() %}{% endcall %}")
                .find("takes not more than 1"),
            std::string::npos);
  EXPECT_NE(error_of("{% call x.y() %}{% endcall %}").find("by its name"), std::string::npos);
}

}  // namespace
}  // namespace vc::server
