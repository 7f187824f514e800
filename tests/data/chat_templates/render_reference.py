#!/usr/bin/env python3
"""Renders every template here the way Hugging Face transformers renders chat templates
(ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, raise_exception, tojson
with ensure_ascii=False and the keys in their given order, tools=None unless given),
add_generation_prompt=True, with Python's jinja2, and writes
  expected.json:       every conversation of conversations.json, no tools;
  expected_tools.json: every conversation of tool_conversations.json, with its tools;
as {template: {conversation: {"text": ...} or {"error": message} (raise_exception) or
{"failure": exception type} (the template itself fails)}}. As the server does (and
vLLM), a tool call's "arguments" string holding a JSON object is given to the template
as that object. Run it after changing a template or a conversation (python3-jinja2;
the committed files were made with jinja2 3.1.6); tests/server/chat_template_test.cpp
compares the C++ renderer with them."""
import json
import pathlib

from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

here = pathlib.Path(__file__).parent


def raise_exception(message):
    raise TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def with_parsed_arguments(messages):
    for m in messages:
        for call in m.get("tool_calls") or []:
            args = call.get("function", {}).get("arguments")
            if isinstance(args, str):
                try:
                    parsed = json.loads(args)
                except ValueError:
                    continue
                if isinstance(parsed, dict):
                    call["function"]["arguments"] = parsed
    return messages


env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
data = json.loads((here / "conversations.json").read_text())
tool_data = json.loads((here / "tool_conversations.json").read_text())
plain = {name: (messages, None) for name, messages in data["conversations"].items()}
with_tools = {name: (c["messages"], tool_data["tools"] if c["tools"] else None)
              for name, c in tool_data["conversations"].items()}
for conversations, file in ((plain, "expected.json"), (with_tools, "expected_tools.json")):
    out = {}
    for path in sorted(here.glob("*.jinja")):
        name = path.stem
        template = env.from_string(path.read_text())
        out[name] = {}
        for conv, (messages, tools) in conversations.items():
            try:
                text = template.render(messages=with_parsed_arguments(messages), tools=tools,
                                       add_generation_prompt=True, **data["special_tokens"][name])
                out[name][conv] = {"text": text}
            except TemplateError as e:
                out[name][conv] = {"error": str(e)}
            except Exception as e:  # noqa: BLE001 - the template's own failure
                out[name][conv] = {"failure": type(e).__name__}
    (here / file).write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
