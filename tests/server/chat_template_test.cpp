// The Jinja subset renders the real chat templates of the Llama-3, Mistral, Qwen2 and
// Qwen3 families exactly as Python's jinja2 does (tests/data/chat_templates: the
// renderings of render_reference.py, made with Debian's python3-jinja2 3.1.2).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tools/server/api_error.hpp"
#include "tools/server/chat_template.hpp"
#include "tools/server/jinja.hpp"

namespace vc::server {
namespace {

using nlohmann::json;

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const std::string kDir = std::string(VC_TEST_DATA_DIR) + "/chat_templates/";

TEST(chat_template, renders_the_four_families_as_python_jinja2_does) {
  const json data = json::parse(read(kDir + "conversations.json"));
  const json expected = json::parse(read(kDir + "expected.json"));
  int checked = 0, refused = 0;
  for (const char* name : {"llama3", "mistral", "qwen2", "qwen3"}) {
    const json tokens = data["special_tokens"][name];
    const ChatTemplate t(read(kDir + name + ".jinja"), tokens["bos_token"], tokens["eos_token"]);
    ASSERT_EQ(t.parse_error(), "") << name;
    for (const auto& [conv, messages] : data["conversations"].items()) {
      SCOPED_TRACE(std::string(name) + "/" + conv);
      const json& want = expected.at(name).at(conv);
      if (want.contains("error")) {
        try {
          (void)t.render(messages);
          ADD_FAILURE() << "rendered; jinja2 raised " << want["error"];
        } catch (const ApiError& e) {
          EXPECT_EQ(e.status(), 400);
          EXPECT_EQ(e.param(), "messages");
          EXPECT_NE(std::string(e.what()).find(want["error"].get<std::string>()), std::string::npos)
              << e.what();
          ++refused;
        }
      } else {
        EXPECT_EQ(t.render(messages), want["text"].get<std::string>());
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 24);
  EXPECT_EQ(refused, 4);
}

TEST(chat_template, a_template_outside_the_subset_fails_with_a_clear_error) {
  const ChatTemplate t("{% macro m() %}x{% endmacro %}{{ m() }}", "", "");
  EXPECT_NE(t.parse_error().find("the tag 'macro' is not supported"), std::string::npos)
      << t.parse_error();
  try {
    (void)t.render(json::array({{{"role", "user"}, {"content", "hi"}}}));
    FAIL() << "rendered";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 500);
    EXPECT_EQ(e.code(), "chat_template_unsupported");
    EXPECT_NE(std::string(e.what()).find("line 1"), std::string::npos) << e.what();
  }
  const ChatTemplate unknown_filter("{{ messages | wordwrap }}", "", "");
  EXPECT_THROW((void)unknown_filter.render(json::array({{{"role", "user"}, {"content", "x"}}})),
               ApiError);
}

TEST(chat_template, malformed_messages_are_refused_naming_the_field) {
  const ChatTemplate t(read(kDir + "qwen2.jinja"), "", "<|im_end|>");
  auto param_of = [&](const json& messages) {
    try {
      (void)t.render(messages);
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400);
      return e.param();
    }
    return std::string("(rendered)");
  };
  EXPECT_EQ(param_of(json::array()), "messages");
  EXPECT_EQ(param_of(json::array({{{"content", "x"}}})), "messages[0].role");
  EXPECT_EQ(param_of(json::array({{{"role", "user"}, {"content", 5}}})), "messages[0].content");
  EXPECT_EQ(param_of(json::array({{{"role", "user"},
                                   {"content", {{{"type", "image_url"}, {"image_url", "x"}}}}}})),
            "messages[0].content");
  // Text parts are joined.
  EXPECT_NE(t.render(json::array({{{"role", "user"},
                                   {"content", {{{"type", "text"}, {"text", "a"}},
                                                {{"type", "text"}, {"text", "b"}}}}}}))
                .find("user\nab<|im_end|>"),
            std::string::npos);
}

TEST(jinja, follows_python_semantics_the_templates_rely_on) {
  auto render = [](const std::string& src, const json& ctx = json::object()) {
    return jinja::Template(src).render(ctx);
  };
  EXPECT_EQ(render("{{ 'abc'[::-1] }}{{ [1,2,3][-1] }}{{ 'héllo'[1:3] }}"), "cba3él");
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% for x in [1,2,3] %}{% set ns.n = ns.n + x %}"
                   "{% set local = x %}{% endfor %}{{ ns.n }}{{ local is defined }}"),
            "6False");
  EXPECT_EQ(render("{{ x is defined and x.y }}|{{ none }}|{{ 1 == 1.0 }}|{{ 7 // 2 }}{{ -7 % 3 }}",
                   {{"x", {{"y", "ok"}}}}),
            "ok|None|True|32");
  EXPECT_EQ(render("  {%- if true %}\n  a\n  {% endif %}\nb"), "  a\nb");
  EXPECT_EQ(render("{% for k, v in d.items() %}{{ k }}={{ v }};{% else %}none{% endfor %}",
                   {{"d", {{"a", 1}}}}),
            "a=1;");
  EXPECT_EQ(render("{{ ' a b '.split() | length }}{{ 'x,y'.split(',') | last }}{{ '  t  ' | trim }}"),
            "2yt");
  EXPECT_THROW((void)render("{{ raise_exception('no') }}"), jinja::RaisedError);
  EXPECT_THROW((void)jinja::Template("{% if x %}"), jinja::TemplateError);
}

}  // namespace
}  // namespace vc::server
