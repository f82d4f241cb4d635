"""The official `openai` Python SDK against a running tollgate (real SmolLM2 weights).

Started by scripts/test, which passes the server's base URL in TOLLGATE_BASE_URL.
"""
import os

import openai
import pytest

BASE_URL = os.environ["TOLLGATE_BASE_URL"]
MODEL = "smollm2-135m-instruct"
MESSAGES = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is the capital of France?"},
]


@pytest.fixture(scope="module")
def client():
    # No auth yet (the metering issue adds keys); the SDK still needs some key string.
    return openai.OpenAI(base_url=BASE_URL, api_key="sk-svc-" + "0" * 48, max_retries=0)


def test_plain_completion(client):
    r = client.chat.completions.create(model=MODEL, messages=MESSAGES, temperature=0, max_tokens=30)
    assert r.id.startswith("chatcmpl-")
    assert r.object == "chat.completion"
    assert r.model == MODEL
    assert "Paris" in r.choices[0].message.content
    assert r.choices[0].finish_reason == "stop"
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    service = r.model_extra["service"]
    assert service["request_id"].startswith("req_")
    assert isinstance(service["cost_micros"], int)


def test_streamed_completion_matches_plain(client):
    plain = client.chat.completions.create(model=MODEL, messages=MESSAGES, temperature=0, max_tokens=30)
    stream = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, temperature=0, max_tokens=30, stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == plain.choices[0].message.content
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == plain.usage.completion_tokens
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"


def test_models_list(client):
    ids = [m.id for m in client.models.list()]
    assert MODEL in ids
    m = client.models.retrieve(MODEL)
    assert m.owned_by == "Hugging Face"
    assert m.model_extra["pricing"]["input_micros_per_mtok"] > 0


def test_unsupported_parameter_is_bad_request(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=MESSAGES, logprobs=True)
    assert e.value.code == "unsupported_parameter"
    assert e.value.param == "logprobs"
    assert e.value.response.headers["x-request-id"].startswith("req_")


def test_unknown_model_is_not_found(client):
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="no-such-model", messages=MESSAGES)
    assert e.value.code == "model_not_found"
    assert e.value.param == "model"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("no-such-model")


def test_invalid_value_is_unprocessable(client):
    with pytest.raises(openai.UnprocessableEntityError) as e:
        client.chat.completions.create(model=MODEL, messages=MESSAGES, temperature=5)
    assert e.value.code == "invalid_request"
    assert e.value.param == "temperature"
    assert e.value.body["details"]["errors"][0]["param"] == "temperature"


def test_context_length_exceeded(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=10_000)
    assert e.value.code == "context_length_exceeded"
