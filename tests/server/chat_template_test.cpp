// The Jinja subset renders the real chat templates of the Llama-3, Mistral, Qwen2 and
// Qwen3 families, and three written for these tests (Llama-3.1-style tool calling, a
// template built from macros, one from call blocks and select/reject), exactly as
// Python's jinja2 does, with and without
// tools (tests/data/chat_templates: the renderings of render_reference.py).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "kernels/error.hpp"
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

using ordered = nlohmann::ordered_json;

const char* const kTemplates[] = {"llama3",        "mistral", "qwen2",      "qwen3",
                                  "llama31_tools", "macros",  "call_blocks"};

// What happened to each rendering, by the outcome jinja2 had.
struct Outcomes {
  int rendered = 0, refused = 0, failed = 0;
};

// Renders `messages` (and `tools`) with `t` and compares with jinja2's outcome `want`:
// the same text, the template's raise_exception as a 400 naming messages, or the
// template's own failure as a 500.
void expect_as_jinja2(const ChatTemplate& t, const ordered& messages, const ordered& tools,
                      const json& want, Outcomes& n) {
  if (want.contains("text")) {
    EXPECT_EQ(t.render(messages, tools), want["text"].get<std::string>());
    ++n.rendered;
    return;
  }
  try {
    (void)t.render(messages, tools);
    ADD_FAILURE() << "rendered; jinja2 gave " << want;
  } catch (const ApiError& e) {
    if (want.contains("error")) {
      EXPECT_EQ(e.status(), 400);
      EXPECT_EQ(e.param(), "messages");
      EXPECT_NE(std::string(e.what()).find(want["error"].get<std::string>()), std::string::npos)
          << e.what();
      ++n.refused;
    } else {
      EXPECT_EQ(e.status(), 500) << e.what() << " (jinja2: " << want << ")";
      EXPECT_EQ(e.code(), "chat_template_unsupported");
      ++n.failed;
    }
  }
}

ChatTemplate load(const json& data, const std::string& name) {
  const json tokens = data["special_tokens"][name];
  return ChatTemplate(read(kDir + name + ".jinja"), tokens["bos_token"], tokens["eos_token"]);
}

TEST(chat_template, renders_the_templates_as_python_jinja2_does) {
  const json data = json::parse(read(kDir + "conversations.json"));
  const ordered conversations = ordered::parse(read(kDir + "conversations.json"))["conversations"];
  const json expected = json::parse(read(kDir + "expected.json"));
  Outcomes n;
  for (const char* name : kTemplates) {
    const ChatTemplate t = load(data, name);
    ASSERT_EQ(t.parse_error(), "") << name;
    for (const auto& [conv, messages] : conversations.items()) {
      SCOPED_TRACE(std::string(name) + "/" + conv);
      expect_as_jinja2(t, messages, nullptr, expected.at(name).at(conv), n);
    }
  }
  EXPECT_EQ(n.rendered, 45);
  EXPECT_EQ(n.refused, 4);
}

// Tools reach the template as Hugging Face's apply_chat_template passes them, tool
// calls and tool results render, and the keys keep the request's order in tojson and
// items() (the tools are written unsorted); templates without tools ignore them.
TEST(chat_template, renders_tools_and_tool_calls_as_python_jinja2_does) {
  const json data = json::parse(read(kDir + "conversations.json"));
  const ordered tool_data = ordered::parse(read(kDir + "tool_conversations.json"));
  const json expected = json::parse(read(kDir + "expected_tools.json"));
  Outcomes n;
  for (const char* name : kTemplates) {
    const ChatTemplate t = load(data, name);
    for (const auto& [conv, c] : tool_data["conversations"].items()) {
      SCOPED_TRACE(std::string(name) + "/" + conv);
      expect_as_jinja2(t, c["messages"], c["tools"].get<bool>() ? tool_data["tools"] : ordered(),
                       expected.at(name).at(conv), n);
    }
  }
  EXPECT_EQ(n.rendered, 28);
  EXPECT_EQ(n.refused, 5);
  EXPECT_EQ(n.failed, 2);
  // The tools' keys in the order they came, not sorted.
  const ChatTemplate qwen3 = load(data, "qwen3");
  const std::string text = qwen3.render(tool_data["conversations"]["tools_first_turn"]["messages"],
                                        tool_data["tools"]);
  EXPECT_NE(text.find(R"({"type": "function", "function": {"name": "get_weather", "description")"),
            std::string::npos)
      << text;
}

TEST(chat_template, malformed_tools_and_tool_calls_are_refused_naming_the_field) {
  const ChatTemplate t(read(kDir + "qwen3.jinja"), "", "<|im_end|>");
  auto param_of = [&](const ordered& messages, const ordered& tools) {
    try {
      (void)t.render(messages, tools);
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400);
      return e.param();
    }
    return std::string("(rendered)");
  };
  const ordered user = {{"role", "user"}, {"content", "x"}};
  const ordered fn = {{"name", "f"}, {"arguments", "{}"}};
  EXPECT_EQ(param_of(ordered::array({user}), "all"), "tools");
  EXPECT_EQ(param_of(ordered::array({user}), ordered::array({{{"type", "function"}}})), "tools[0]");
  EXPECT_EQ(param_of(ordered::array({user}),
                     ordered::array({{{"type", "function"}, {"function", {{"name", 3}}}}})),
            "tools[0].function.name");
  auto with_calls = [&](const ordered& calls, const char* role = "assistant") {
    return ordered::array({user, {{"role", role}, {"content", ""}, {"tool_calls", calls}}});
  };
  EXPECT_EQ(param_of(with_calls("f"), nullptr), "messages[1].tool_calls");
  EXPECT_EQ(param_of(with_calls(ordered::array({{{"type", "function"}}})), nullptr),
            "messages[1].tool_calls[0]");
  EXPECT_EQ(param_of(with_calls(ordered::array({{{"type", "web"}, {"function", fn}}})), nullptr),
            "messages[1].tool_calls[0].type");
  EXPECT_EQ(param_of(with_calls(ordered::array({{{"function", {{"name", "f"}, {"arguments", 5}}}}})),
                     nullptr),
            "messages[1].tool_calls[0].function.arguments");
  EXPECT_EQ(param_of(with_calls(ordered::array({{{"function", fn}}}), "user"), nullptr),
            "messages[1].tool_calls");
  // "tool_calls": null (as clients echo an assistant message back) is no calls.
  const ChatTemplate llama31(read(kDir + "llama31_tools.jinja"), "", "");
  const ordered answer = {{"role", "assistant"}, {"content", "ok"}};
  ordered echoed = answer;
  echoed["tool_calls"] = nullptr;
  EXPECT_EQ(llama31.render(ordered::array({user, echoed, user}), nullptr),
            llama31.render(ordered::array({user, answer, user}), nullptr));
  // Arguments that are not a JSON object's text reach the template as the string.
  const std::string text = t.render(
      with_calls(ordered::array({{{"function", {{"name", "f"}, {"arguments", "not json"}}}}})),
      nullptr);
  EXPECT_NE(text.find(R"({"name": "f", "arguments": not json})"), std::string::npos) << text;
}

TEST(chat_template, a_template_outside_the_subset_fails_with_a_clear_error) {
  const ChatTemplate t("{% block m %}x{% endblock %}", "", "");
  EXPECT_NE(t.parse_error().find("the tag 'block' is not supported"), std::string::npos)
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

TEST(chat_template, a_named_template_list_with_a_bad_entry_is_refused_naming_the_file_and_the_entry) {
  // A name that is not a string gave a raw json type error, after the model loaded.
  const auto dir = std::filesystem::temp_directory_path() / "vc_chat_template_named";
  std::filesystem::create_directories(dir);
  const auto write = [&](const json& list) {
    std::ofstream(dir / "tokenizer_config.json") << json{{"chat_template", list}}.dump();
  };
  const auto error_of = [&] {
    try {
      (void)ChatTemplate::from_model_dir(dir.string());
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(loaded)");
  };
  write(json::array({{{"name", 5}, {"template", "x"}}, {{"name", "default"}, {"template", "y"}}}));
  const std::string e = error_of();
  EXPECT_NE(e.find("tokenizer_config.json: field 'chat_template[0]': expected an object with a string \"name\""),
            std::string::npos)
      << e;
  write(json::array({{{"name", "tool_use"}, {"template", "x"}}}));
  EXPECT_NE(error_of().find("no template named 'default'"), std::string::npos);
  write(json::array({{{"name", "tool_use"}, {"template", "x"}}, {{"name", "default"}, {"template", "y"}}}));
  EXPECT_EQ(error_of(), "(loaded)");
  std::filesystem::remove_all(dir);
}

TEST(jinja, follows_python_semantics_the_templates_rely_on) {
  auto render = [](const std::string& src, const ordered& ctx = ordered::object()) {
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
  // Mappings keep their insertion order (Python's dicts), and compare regardless of it.
  const ordered d = ordered::parse(R"({"z": 1, "a": {"y": [1.5, "é"], "b": null}})");
  EXPECT_EQ(render("{{ d | tojson }}|{% for k, v in d.items() %}{{ k }}{% endfor %}|{{ d | list }}"
                   "|{{ {'q': 1, 'c': 2} | tojson }}|{{ {'a': 1, 'b': 2} == {'b': 2, 'a': 1} }}",
                   {{"d", d}}),
            R"({"z": 1, "a": {"y": [1.5, "é"], "b": null}}|za|['z', 'a']|{"q": 1, "c": 2}|True)");
  EXPECT_EQ(render("{{ d | tojson(indent=2) }}", {{"d", d}}),
            "{\n  \"z\": 1,\n  \"a\": {\n    \"y\": [\n      1.5,\n      \"é\"\n    ],\n"
            "    \"b\": null\n  }\n}");
  EXPECT_THROW((void)jinja::Template("{% if x %}"), jinja::TemplateError);
  // One newline at the end of the source is dropped (keep_trailing_newline=False).
  EXPECT_EQ(render("a\n{{ 'x' }}\n"), "a\nx");
  EXPECT_EQ(render("a\n\n"), "a\n");
}

TEST(jinja, macros_take_positional_and_keyword_arguments_and_defaults_as_jinja2_does) {
  auto render = [](const std::string& src, const ordered& ctx = ordered::object()) {
    return jinja::Template(src).render(ctx);
  };
  // Checked with python3 -c 'import jinja2; print(jinja2.Template(SRC).render())'.
  const std::string defs =
      "{% macro greet(name, greeting='Hello', punct='!') %}{{ greeting }}, {{ name }}{{ punct }}"
      "{% endmacro %}"
      "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1) | int }}{% endif %}"
      "{% endmacro %}";
  EXPECT_EQ(render(defs + "{{ greet('Ann') }} {{ greet('Bo', 'Hi') }} {{ greet(punct='?', name='Cy') }}"
                          " {{ greet('Di', punct='.') }} {{ fact(5) }}"),
            "Hello, Ann! Hi, Bo! Hello, Cy? Hello, Di. 120");
  // The body sees top-level variables and its own parameters; a missing one is undefined;
  // its own sets stay inside it.
  EXPECT_EQ(render("{% set top = 'T' %}{% macro m(a, b) %}{% set top = 'inner' %}{{ top }}"
                   "{{ a }}{{ b is defined }}{{ x }}{% endmacro %}"
                   "{% for x in [1] %}{{ m('A') }}{% endfor %}{{ top }}",
                   {{"x", "X"}}),
            "innerAFalseXT");
  auto error_of = [&](const std::string& src) {
    try {
      (void)render(src);
    } catch (const jinja::TemplateError& e) {
      return std::string(e.what());
    }
    return std::string("(rendered)");
  };
  EXPECT_NE(error_of(defs + "{{ greet('a', 'b', 'c', 'd') }}").find("takes not more than 3"),
            std::string::npos);
  EXPECT_NE(error_of(defs + "{{ greet('a', mood=1) }}").find("no keyword argument 'mood'"),
            std::string::npos);
  EXPECT_NE(error_of(defs + "{{ greet('a', name='b') }}").find("multiple values for argument 'name'"),
            std::string::npos);
  EXPECT_NE(error_of("{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}").find("nested deeper"),
            std::string::npos);
  EXPECT_NE(error_of("{% macro m(a=1, b) %}{% endmacro %}").find("'b' without a default"),
            std::string::npos);
  EXPECT_NE(error_of("{% macro m() %}x").find("missing 'endmacro'"), std::string::npos);
}

}  // namespace
}  // namespace vc::server
