"""Tool calling and structured outputs with the official `openai` Python SDK (real SmolLM2).

Started by scripts/test like test_openai_sdk.py. Covers the conversation loop SDK users write
(`messages.append(r.choices[0].message)`), forced and named tool calls, `tool_choice="none"`,
stream/non-stream equality, `chat.completions.parse` with a pydantic model, and a conformance
run over 50 JSON schemas whose every output must validate (`jsonschema`).
"""
import json
import os

import jsonschema
import openai
import pydantic
import pytest

BASE_URL = os.environ["TOLLGATE_BASE_URL"]
API_KEY = os.environ["TOLLGATE_API_KEY"]
MODEL = "smollm2-135m-instruct"
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"location": {"type": "string", "description": "City name"}},
            "required": ["location"],
        },
    },
}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def client():
    return openai.OpenAI(base_url=BASE_URL, api_key=API_KEY, max_retries=0)


def test_conversation_loop_appends_the_returned_message(client):
    messages = [{"role": "user", "content": "Say hello."}]
    r = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=8, temperature=0, tools=None)
    messages.append(r.choices[0].message)  # sends back "refusal": null, "tool_calls": null
    messages.append({"role": "user", "content": "Again."})
    r2 = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=8, temperature=0)
    assert r2.choices[0].message.content
    dumped = [m if isinstance(m, dict) else m.model_dump() for m in messages]  # adds "annotations"
    r3 = client.chat.completions.create(model=MODEL, messages=dumped, max_tokens=4, temperature=0)
    assert r3.choices[0].finish_reason in ("stop", "length")


def test_required_tool_call_then_the_tool_result_turn(client):
    r = client.chat.completions.create(
        model=MODEL, messages=ASK, tools=[WEATHER], tool_choice="required", max_tokens=60, temperature=0,
    )
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    call = choice.message.tool_calls[0]
    assert call.id.startswith("call_") and call.type == "function"
    assert call.function.name == "get_weather"
    args = json.loads(call.function.arguments)
    assert "paris" in args["location"].lower()
    messages = ASK + [choice.message, {"role": "tool", "tool_call_id": call.id, "content": "18 C, sunny"}]
    r2 = client.chat.completions.create(model=MODEL, messages=messages, tools=[WEATHER], tool_choice="none",
                                        max_tokens=30, temperature=0)
    assert r2.choices[0].message.tool_calls is None
    assert r2.choices[0].message.content


def test_tool_definitions_are_billed_as_prompt_tokens(client):
    plain = client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=1, temperature=0)
    with_tools = client.chat.completions.create(model=MODEL, messages=ASK, tools=[WEATHER], tool_choice="none",
                                                max_tokens=1, temperature=0)
    assert with_tools.usage.prompt_tokens > plain.usage.prompt_tokens + 20


def test_named_function_and_streaming_match(client):
    kwargs = dict(model=MODEL, messages=ASK, tools=[WEATHER], max_tokens=60, temperature=0.8, seed=7,
                  tool_choice={"type": "function", "function": {"name": "get_weather"}})
    plain = client.chat.completions.create(**kwargs)
    chunks = list(client.chat.completions.create(stream=True, **kwargs))
    name, args, first = None, "", None
    for c in chunks:
        for d in (c.choices[0].delta.tool_calls or []) if c.choices else []:
            assert d.index == 0
            if d.id:
                first = d
                name = d.function.name
            args += d.function.arguments or ""
        if c.choices:
            assert not c.choices[0].delta.content, "tag text leaked into content"
    assert first is not None and first.type == "function"
    call = plain.choices[0].message.tool_calls[0]
    assert (name, args) == (call.function.name, call.function.arguments)
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_tool_choice_none_never_calls(client):
    r = client.chat.completions.create(model=MODEL, messages=ASK, tools=[WEATHER], tool_choice="none",
                                       max_tokens=30, temperature=0)
    assert r.choices[0].message.tool_calls is None
    assert r.choices[0].finish_reason in ("stop", "length")


def test_tool_errors_name_their_param(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=ASK, tools=[WEATHER],
                                       tool_choice={"type": "function", "function": {"name": "nope"}})
    assert (e.value.code, e.value.param) == ("invalid_tool_choice", "tool_choice")
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=ASK + [
            {"role": "tool", "tool_call_id": "call_missing", "content": "x"}])
    assert (e.value.code, e.value.param) == ("invalid_tool_call_id", "messages[1].tool_call_id")


class Person(pydantic.BaseModel):
    name: str
    age: int


def test_parse_returns_a_pydantic_object(client):
    r = client.chat.completions.parse(
        model=MODEL, response_format=Person, max_tokens=40, temperature=0,
        messages=[{"role": "user", "content": "Ann is 31 years old. Give her name and age as JSON."}],
    )
    p = r.choices[0].message.parsed
    assert isinstance(p, Person)
    assert p.name and p.age >= 0


def conformance_schemas():
    """50 schemas over the features clients use: nesting, bounded arrays, enums, anyOf,
    required, additionalProperties false, number ranges, string patterns."""
    word = {"type": "string", "maxLength": 12}
    base = [
        {"type": "object", "properties": {"name": word, "age": {"type": "integer", "minimum": 0, "maximum": 120}},
         "required": ["name", "age"], "additionalProperties": False},
        {"type": "object", "properties": {"tags": {"type": "array", "items": word, "minItems": 1, "maxItems": 3}},
         "required": ["tags"], "additionalProperties": False},
        {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]}}, "required": ["color"]},
        {"type": "object", "properties": {"v": {"anyOf": [{"type": "integer"}, {"type": "boolean"}]}},
         "required": ["v"], "additionalProperties": False},
        {"type": "object", "properties": {"p": {"type": "object", "properties": {"x": {"type": "number", "minimum": -5, "maximum": 5},
                                                                               "y": {"type": "number", "minimum": -5, "maximum": 5}},
                                                "required": ["x", "y"], "additionalProperties": False}},
         "required": ["p"], "additionalProperties": False},
        {"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{2}$"}},
         "required": ["code"], "additionalProperties": False},
        {"type": "object", "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer", "exclusiveMinimum": 0, "maximum": 9}},
         "required": ["ok", "n"], "additionalProperties": False},
        {"type": "object", "properties": {"items": {"type": "array", "maxItems": 2, "items": {
            "type": "object", "properties": {"id": {"type": "integer", "minimum": 1, "maximum": 99}, "label": word},
            "required": ["id", "label"], "additionalProperties": False}}}, "required": ["items"], "additionalProperties": False},
        {"type": "object", "properties": {"kind": {"const": "point"}, "z": {"type": ["integer", "null"]}},
         "required": ["kind", "z"], "additionalProperties": False},
        {"type": "object", "properties": {"when": {"type": "string", "pattern": "^20[0-9]{2}-[01][0-9]-[0-3][0-9]$"},
                                          "level": {"enum": [1, 2, 3]}}, "required": ["when", "level"], "additionalProperties": False},
    ]
    prompts = ["Describe a cat.", "Give an example.", "Fill in plausible values.", "Reply with data about Paris.",
               "Make something up."]
    return [(s, p) for s in base for p in prompts]


@pytest.mark.parametrize("schema,prompt", conformance_schemas())
def test_json_schema_conformance(client, schema, prompt):
    r = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": prompt + " Answer in JSON."}],
        response_format={"type": "json_schema", "json_schema": {"name": "out", "schema": schema, "strict": True}},
        max_tokens=120, temperature=0.7, seed=11,
    )
    assert r.choices[0].finish_reason == "stop", r.choices[0].message.content
    jsonschema.validate(json.loads(r.choices[0].message.content), schema)
