#!/usr/bin/env python3
"""Regenerate tests/fixtures/templates: published chat templates with tool support and what
transformers' apply_chat_template renders for one tool conversation.

The templates come from llama.cpp's `models/templates/` as shipped in the `llama-cpp-python`
0.3.36 source distribution on PyPI (each is the chat template of the model it is named after).
The expected text is rendered by `transformers.utils.chat_template_utils.render_jinja_template`
(the function behind `apply_chat_template`; no weights needed) with `add_generation_prompt=True`
and a fixed `strftime_now` date, so tests/templates.rs can compare tollgate's renderer with it
byte for byte. The assistant message that only calls a tool has `content: ""`: tollgate hands
templates a string there (clients send null), as Qwen3's template tests `in message.content`.

Usage: scripts/template-fixtures.py SDIST_DIR   (a directory holding the unpacked sdist)
Needs: pip install transformers jinja2
"""

import json
import pathlib
import sys

import datetime

import transformers.utils.chat_template_utils as ctu
from transformers.utils.chat_template_utils import render_jinja_template

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "templates"

# (fixture name, template file in llama.cpp's models/templates, bos_token, eos_token)
TEMPLATES = [
    ("qwen2.5", "Qwen-Qwen2.5-7B-Instruct.jinja", "", "<|im_end|>"),
    ("qwen3", "Qwen-Qwen3-0.6B.jinja", "", "<|im_end|>"),
    ("hermes-2-pro", "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja", "<|begin_of_text|>", "<|im_end|>"),
    ("llama-3.1", "meta-llama-Llama-3.1-8B-Instruct.jinja", "<|begin_of_text|>", "<|eot_id|>"),
    ("llama-3.2", "meta-llama-Llama-3.2-3B-Instruct.jinja", "<|begin_of_text|>", "<|eot_id|>"),
    ("llama-3.3", "meta-llama-Llama-3.3-70B-Instruct.jinja", "<|begin_of_text|>", "<|eot_id|>"),
    ("mistral-nemo", "mistralai-Mistral-Nemo-Instruct-2407.jinja", "<s>", "</s>"),
    ("command-r7b", "CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja", "<BOS_TOKEN>", "<|END_OF_TURN_TOKEN|>"),
]

# The fixed day `strftime_now` formats in the fixtures (transformers reads the clock through its
# module's `datetime`; tests/templates.rs fixes the same day).
DAY = datetime.datetime(2024, 7, 26, 12, 0, 0)


class _FixedClock(datetime.datetime):
    @classmethod
    def now(cls, tz=None):
        return DAY


ctu.datetime = _FixedClock

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather at a <location> & time's \"now\"",
            "parameters": {
                "type": "object",
                "properties": {
                    "location": {"type": "string", "description": "City, e.g. Paris"},
                    "unit": {"type": "string", "enum": ["c", "f"]},
                },
                "required": ["location"],
            },
        },
    }
]

MESSAGES = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What's the weather in Paris & <Lyon>?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "abc123def",
                "type": "function",
                "function": {"name": "get_weather", "arguments": {"location": "Paris", "unit": "c"}},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "abc123def", "content": "18 C and sunny"},
    {"role": "assistant", "content": "It's 18 C and sunny in Paris."},
    {"role": "user", "content": "And in Lyon?"},
]


def main() -> None:
    sdist = pathlib.Path(sys.argv[1])
    found = list(sdist.glob("**/vendor/llama.cpp/models/templates"))
    if not found:
        sys.exit(f"no vendor/llama.cpp/models/templates under {sdist}")
    src = found[0]
    OUT.mkdir(parents=True, exist_ok=True)
    manifest = []
    for name, file, bos, eos in TEMPLATES:
        template = (src / file).read_text()
        rendered = render_jinja_template(
            conversations=[MESSAGES],
            tools=TOOLS,
            chat_template=template,
            add_generation_prompt=True,
            bos_token=bos,
            eos_token=eos,
        )[0][0]
        (OUT / f"{name}.jinja").write_text(template)
        (OUT / f"{name}.expected").write_text(rendered)
        manifest.append({"name": name, "source": file, "bos_token": bos, "eos_token": eos})
    (OUT / "manifest.json").write_text(
        json.dumps({"date": DAY.isoformat(), "tools": TOOLS, "messages": MESSAGES, "templates": manifest}, indent=2)
        + "\n"
    )
    print(f"wrote {len(manifest)} fixtures to {OUT}")


if __name__ == "__main__":
    main()
