"""The Responses API (`POST /v1/responses`) with the official `openai` Python SDK (real SmolLM2).

Started by scripts/test like test_openai_sdk.py. Covers `client.responses.create` (text, a
function tool whose call and output go back, `text.format` json_schema and `responses.parse`),
`client.responses.stream(...)` with its event iterator and `get_final_response()`,
`previous_response_id`, `retrieve`/`delete` of a stored response and 404 across accounts, and
the 400s for what is not served. Every answer is billed exactly: the balance moves by the price
rule applied to the reported usage (scripts/test runs `ledger check` afterwards).
"""
import json
import os

import jsonschema
import openai
import pydantic
import pytest
from ledger import balance_micros

BASE_URL = os.environ["TOLLGATE_BASE_URL"]
MODEL = "smollm2-135m-instruct"
# SmolLM2-135M-Instruct's list prices, micro-USD per 1M tokens (models.toml).
# SmolLM2's list prices, micro-USD per 1M tokens; cached input is a tenth of input by default.
INPUT_PRICE, CACHED_PRICE, OUTPUT_PRICE = 20_000, 2_000, 40_000
INSTRUCTIONS = "You are a helpful assistant."
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The current weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"location": {"type": "string", "description": "City name"}},
        "required": ["location"],
    },
}


@pytest.fixture(scope="module")
def client():
    return openai.OpenAI(base_url=BASE_URL, api_key=os.environ["TOLLGATE_API_KEY"], max_retries=0)


@pytest.fixture(scope="module")
def other():
    """Another account's key."""
    return openai.OpenAI(base_url=BASE_URL, api_key=os.environ["TOLLGATE_POOR_KEY"], max_retries=0)


def price(usage):
    """The billing rule: ceil(((in - cached) * in_price + cached * cached_price + out * out_price)
    / 1e6), integers."""
    cached = usage.input_tokens_details.cached_tokens
    return -(-((usage.input_tokens - cached) * INPUT_PRICE + cached * CACHED_PRICE
               + usage.output_tokens * OUTPUT_PRICE) // 1_000_000)


def billed_exactly(r, before):
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    # Tokens of an earlier prompt (the same instructions) still cached, never the last one.
    cached = r.usage.input_tokens_details.cached_tokens
    assert 0 <= cached < r.usage.input_tokens
    assert r.usage.output_tokens_details.reasoning_tokens == 0
    cost = r.model_extra["service"]["cost_micros"]
    assert cost == price(r.usage)
    assert before - balance_micros() == cost


def test_text_response_is_billed_exactly(client):
    before = balance_micros()
    r = client.responses.create(
        model=MODEL, instructions=INSTRUCTIONS, input="What is the capital of France?",
        max_output_tokens=30, temperature=0, metadata={"suite": "pytest"},
    )
    assert r.id.startswith("resp_") and r.object == "response"
    assert r.status == "completed" and r.model == MODEL
    assert "Paris" in r.output_text
    assert r.output[0].type == "message" and r.output[0].content[0].type == "output_text"
    assert r.metadata == {"suite": "pytest"} and r.instructions == INSTRUCTIONS
    billed_exactly(r, before)


def test_a_function_call_and_its_output_sent_back(client):
    question = [{"role": "user", "content": "What is the weather in Paris?"}]
    r = client.responses.create(
        model=MODEL, input=question, tools=[WEATHER], tool_choice="required",
        max_output_tokens=60, temperature=0,
    )
    calls = [item for item in r.output if item.type == "function_call"]
    assert calls, r.output
    call = calls[0]
    assert call.name == "get_weather" and call.call_id.startswith("call_")
    assert isinstance(json.loads(call.arguments)["location"], str)
    # The SDK loop: the output items go back as they are, then the tool's result.
    before = balance_micros()
    r2 = client.responses.create(
        model=MODEL, tools=[WEATHER], max_output_tokens=40, temperature=0,
        input=question + r.output + [{"type": "function_call_output", "call_id": call.call_id, "output": "18C and sunny"}],
    )
    assert r2.output_text.strip()
    billed_exactly(r2, before)


class City(pydantic.BaseModel):
    name: str
    country: str


def test_text_format_json_schema_and_parse(client):
    schema = City.model_json_schema()
    schema["additionalProperties"] = False
    r = client.responses.create(
        model=MODEL, instructions=INSTRUCTIONS, input="Name a city in France.", max_output_tokens=60, temperature=0,
        text={"format": {"type": "json_schema", "name": "city", "schema": schema, "strict": True}},
    )
    jsonschema.validate(json.loads(r.output_text), schema)
    assert r.text.format.type == "json_schema"
    parsed = client.responses.parse(
        model=MODEL, input="Name a city in Italy.", max_output_tokens=60, temperature=0, text_format=City,
    )
    assert isinstance(parsed.output_parsed, City)


def test_stream_events_and_final_response(client):
    before = balance_micros()
    with client.responses.stream(
        model=MODEL, instructions=INSTRUCTIONS, input="What is the capital of France?", max_output_tokens=30, temperature=0,
    ) as stream:
        events = list(stream)
        final = stream.get_final_response()
    types = [e.type for e in events]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[-1] == "response.completed"
    for t in ["response.output_item.added", "response.content_part.added", "response.output_text.delta",
              "response.output_text.done", "response.output_item.done"]:
        assert t in types, types
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == final.output_text and "Paris" in deltas
    billed_exactly(final, before)
    # The same request whole gives the same text (greedy).
    whole = client.responses.create(
        model=MODEL, instructions=INSTRUCTIONS, input="What is the capital of France?", max_output_tokens=30, temperature=0,
    )
    assert whole.output_text == final.output_text


def test_previous_response_id_continues_and_bills_the_history(client):
    r1 = client.responses.create(
        model=MODEL, instructions=INSTRUCTIONS, input="My name is Ada. Say hello to me.", max_output_tokens=20, temperature=0,
    )
    before = balance_micros()
    r2 = client.responses.create(
        model=MODEL, previous_response_id=r1.id, input="What is my name?", max_output_tokens=20, temperature=0,
    )
    assert r2.previous_response_id == r1.id
    # The first turn's input and output are prepended (instructions are not carried over).
    alone = client.responses.create(model=MODEL, input="What is my name?", max_output_tokens=1, temperature=0, store=False)
    assert r2.usage.input_tokens > alone.usage.input_tokens + r1.usage.output_tokens
    assert balance_micros() == before - r2.model_extra["service"]["cost_micros"] - alone.model_extra["service"]["cost_micros"]
    assert r2.model_extra["service"]["cost_micros"] == price(r2.usage)
    with pytest.raises(openai.NotFoundError) as e:
        client.responses.create(model=MODEL, previous_response_id=alone.id, input="x", max_output_tokens=1)
    assert e.value.body["param"] == "previous_response_id"


def test_retrieve_and_delete_only_by_the_owner(client, other):
    r = client.responses.create(model=MODEL, input="Say hi.", max_output_tokens=5, temperature=0)
    got = client.responses.retrieve(r.id)
    assert got.id == r.id and got.output_text == r.output_text
    with pytest.raises(openai.NotFoundError):
        other.responses.retrieve(r.id)
    with pytest.raises(openai.NotFoundError):
        other.responses.delete(r.id)
    with pytest.raises(openai.NotFoundError):
        other.responses.create(model=MODEL, previous_response_id=r.id, input="x", max_output_tokens=1)
    client.responses.delete(r.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(r.id)


def test_what_is_not_served_is_a_400_naming_it(client):
    before = balance_micros()
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=MODEL, input="x", tools=[{"type": "web_search"}])
    assert (e.value.body["param"], e.value.body["code"]) == ("tools[0].type", "unsupported_tool")
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=MODEL, input="x", background=True)
    assert e.value.body["param"] == "background"
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=MODEL, input="x", reasoning={"effort": "low"})
    # SmolLM2 does not think: any effort but none/minimal is refused, named in Responses terms.
    assert (e.value.body["param"], e.value.body["code"]) == ("reasoning.effort", "unsupported_value")
    assert balance_micros() == before


def test_output_text_logprobs_whole_and_streamed(client):
    args = dict(model=MODEL, instructions=INSTRUCTIONS, input="What is the capital of France?", max_output_tokens=12,
                temperature=0, include=["message.output_text.logprobs"], top_logprobs=3)
    r = client.responses.create(**args)
    part = r.output[0].content[0]
    assert part.logprobs and all(len(t.top_logprobs) == 3 for t in part.logprobs)
    assert "".join(t.token for t in part.logprobs) == part.text
    with client.responses.stream(**args) as stream:
        streamed = [lp for e in stream if e.type == "response.output_text.delta" for lp in e.logprobs]
    assert [(t.token, t.logprob) for t in streamed] == [(t.token, t.logprob) for t in part.logprobs]
