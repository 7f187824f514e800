#!/usr/bin/env python3
"""Renders every template here with every conversation of conversations.json using
Python's jinja2 the way Hugging Face transformers renders chat templates
(ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, raise_exception, tojson
with ensure_ascii=False), add_generation_prompt=True, and writes expected.json:
{template: {conversation: {"text": ...} or {"error": message}}}.
Run once (Debian 12: apt-get install python3-jinja2, version 3.1.2); the output is
committed and tests/server/chat_template_test.cpp compares the C++ renderer with it."""
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


env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
data = json.loads((here / "conversations.json").read_text())
out = {}
for path in sorted(here.glob("*.jinja")):
    name = path.stem
    template = env.from_string(path.read_text())
    out[name] = {}
    for conv, messages in data["conversations"].items():
        try:
            text = template.render(messages=messages, add_generation_prompt=True,
                                   **data["special_tokens"][name])
            out[name][conv] = {"text": text}
        except TemplateError as e:
            out[name][conv] = {"error": str(e)}
(here / "expected.json").write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
