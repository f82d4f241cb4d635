"""The official `openai` Python SDK against a running tollgate (real SmolLM2 weights).

Started by scripts/test, which passes the server's base URL in TOLLGATE_BASE_URL.
"""
import os
import threading
import uuid

import httpx
import openai
import pytest
from ledger import balance_micros

BASE_URL = os.environ["TOLLGATE_BASE_URL"]
API_KEY = os.environ["TOLLGATE_API_KEY"]
POOR_KEY = os.environ["TOLLGATE_POOR_KEY"]
LIMITED_KEY = os.environ["TOLLGATE_LIMITED_KEY"]
MODEL = "smollm2-135m-instruct"
MESSAGES = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is the capital of France?"},
]


@pytest.fixture(scope="module")
def client():
    return openai.OpenAI(base_url=BASE_URL, api_key=API_KEY, max_retries=0)


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
    models = list(client.models.list())
    ids = [m.id for m in models]
    assert MODEL in ids
    assert len(ids) >= 40
    flagged = [m for m in models if not m.model_extra["license"]["commercial_use"]]
    assert flagged, "licence-restricted models stay listed, flagged"
    with pytest.raises(openai.PermissionDeniedError) as e:
        client.chat.completions.create(model=flagged[0].id, messages=MESSAGES)
    assert e.value.code == "model_license_forbids_commercial_use"
    m = client.models.retrieve(MODEL)
    assert m.owned_by == "Hugging Face"
    assert m.model_extra["pricing"]["input_micros_per_mtok"] > 0


def test_unsupported_parameter_is_bad_request(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=MESSAGES, extra_body={"best_of": 2})
    assert e.value.code == "unsupported_parameter"
    assert e.value.param == "best_of"
    assert e.value.response.headers["x-request-id"].startswith("req_")


def test_logit_bias_outside_the_vocabulary_is_bad_request(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=MESSAGES, logit_bias={"99999999": -100})
    assert e.value.code == "invalid_value"
    assert e.value.param == "logit_bias"


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


def test_bad_key_is_authentication_error():
    bad = openai.OpenAI(base_url=BASE_URL, api_key="sk-svc-" + "0" * 48, max_retries=0)
    with pytest.raises(openai.AuthenticationError) as e:
        bad.chat.completions.create(model=MODEL, messages=MESSAGES)
    assert e.value.code == "invalid_api_key"
    assert e.value.response.headers["www-authenticate"] == "Bearer"


def test_insufficient_balance_is_402_and_not_retried():
    poor = openai.OpenAI(base_url=BASE_URL, api_key=POOR_KEY, max_retries=0)
    with pytest.raises(openai.APIStatusError) as first:
        poor.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=10)
    assert first.value.status_code == 402
    assert first.value.code == "INSUFFICIENT_BALANCE"
    assert first.value.body["details"]["available_micros"] == 0
    before = int(first.value.response.headers["x-ratelimit-remaining-requests"])
    retrying = openai.OpenAI(base_url=BASE_URL, api_key=POOR_KEY, max_retries=3)
    with pytest.raises(openai.APIStatusError) as second:
        retrying.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=10)
    assert second.value.status_code == 402
    # One server hit: the rate limiter counted exactly one more request.
    assert int(second.value.response.headers["x-ratelimit-remaining-requests"]) == before - 1


def spend_quota(raw):
    """Send cheap invalid requests on `raw`'s key until it gets a 429 (rate limiting comes first),
    and return that 429's error."""
    for _ in range(2000):
        try:
            raw.chat.completions.create(model=MODEL, messages=MESSAGES, temperature=9)
        except openai.RateLimitError as e:
            return e
        except openai.UnprocessableEntityError:
            pass
    pytest.fail("quota never ran out")


def test_rate_limit_429_is_retried_after_retry_after():
    raw = openai.OpenAI(base_url=BASE_URL, api_key=LIMITED_KEY, max_retries=0)
    # The 429 that ends the spending: asking again could find the quota refilled (one request
    # every 100 ms) on a slow machine, and get the 422 instead.
    limited = spend_quota(raw)
    assert int(limited.response.headers["retry-after"]) >= 1
    # The quota refills continuously (a request every 100 ms at the suite's 600 a minute), so on
    # a slow machine the SDK's first attempt could find a fresh one. A spender keeps the quota
    # empty until the SDK's client sees its 429 (an httpx response hook), then stops, so the
    # SDK's retry after `retry-after-ms` finds the quota refilled.
    stop = threading.Event()
    hook = {"response": [lambda resp: stop.set() if resp.status_code == 429 else None]}
    retrying = openai.OpenAI(base_url=BASE_URL, api_key=LIMITED_KEY, max_retries=2,
                             http_client=httpx.Client(event_hooks=hook))
    for _ in range(20):
        stop.clear()

        def keep_spending():
            while not stop.wait(0):
                try:
                    raw.chat.completions.create(model=MODEL, messages=MESSAGES, temperature=9)
                except (openai.RateLimitError, openai.UnprocessableEntityError):
                    pass

        spender = threading.Thread(target=keep_spending)
        spender.start()
        deadline = threading.Timer(5.0, stop.set)
        deadline.start()
        try:
            r = retrying.chat.completions.with_raw_response.create(model=MODEL, messages=MESSAGES, max_tokens=3)
        finally:
            stop.set()
            deadline.cancel()
            spender.join()
        assert r.http_response.status_code == 200
        if r.retries_taken >= 1:
            break
    assert r.retries_taken >= 1


def test_idempotent_retries_are_charged_once(client):
    key = f"sdk-{uuid.uuid4()}"
    before = balance_micros("sdk@example.com")
    first = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=MESSAGES, temperature=0, max_tokens=12, extra_headers={"Idempotency-Key": key})
    second = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=MESSAGES, temperature=0, max_tokens=12, extra_headers={"Idempotency-Key": key})
    a, b = first.parse(), second.parse()
    assert a.id == b.id
    assert second.http_response.headers["idempotent-replayed"] == "true"
    cost = a.model_extra["service"]["cost_micros"]
    assert cost > 0
    assert balance_micros("sdk@example.com") == before - cost


def test_logprobs_and_top_logprobs(client):
    r = client.chat.completions.create(model=MODEL, messages=MESSAGES, temperature=0, max_tokens=10,
                                       logprobs=True, top_logprobs=5)
    content = r.choices[0].logprobs.content
    assert "".join(t.token for t in content) == r.choices[0].message.content
    for t in content:
        assert t.logprob <= 0 and len(t.top_logprobs) == 5
        assert t.top_logprobs[0].token == t.token  # greedy
        assert bytes(t.bytes).decode() == t.token


def test_n_choices_with_a_seed_bill_the_prompt_once(client):
    """`n=3` with a seed: three choices, each what `n=1` with seed + index gives alone; the
    prompt is billed once (SmolLM2: 20,000 / 40,000 micro-USD per 1M tokens, rounded up)."""
    args = dict(model=MODEL, messages=MESSAGES, temperature=0.9, max_tokens=10)
    r = client.chat.completions.create(n=3, seed=7, **args)
    assert [c.index for c in r.choices] == [0, 1, 2]
    alone = [client.chat.completions.create(n=1, seed=7 + i, **args) for i in range(3)]
    assert [c.message.content for c in r.choices] == [a.choices[0].message.content for a in alone]
    assert r.usage.prompt_tokens == alone[0].usage.prompt_tokens
    assert r.usage.completion_tokens == sum(a.usage.completion_tokens for a in alone)
    want = -(-(r.usage.prompt_tokens * 20_000 + r.usage.completion_tokens * 40_000) // 1_000_000)
    assert r.model_extra["service"]["cost_micros"] == want

    stream = client.chat.completions.create(n=2, seed=7, stream=True, stream_options={"include_usage": True}, **args)
    texts = {0: "", 1: ""}
    finished = set()
    for chunk in stream:
        for c in chunk.choices:
            texts[c.index] += c.delta.content or ""
            if c.finish_reason:
                finished.add(c.index)
    assert finished == {0, 1}
    assert [texts[0], texts[1]] == [c.message.content for c in r.choices[:2]]


def test_a_repeated_prompt_reads_its_prefix_from_the_cache(client):
    """The same prompt twice: the second reuses every whole 16-token block the first left in
    the cache (never its last token), reports them as `cached_tokens` and pays the cached-input
    price for them (SmolLM2: 2,000 micro-USD per 1M, a tenth of the input price)."""
    messages = [{"role": "system", "content": "You answer questions about the solar system in one short sentence."},
                {"role": "user", "content": f"Which planet is largest? ({uuid.uuid4()})"}]
    first = client.chat.completions.create(model=MODEL, messages=messages, temperature=0, max_tokens=12)
    again = client.chat.completions.create(model=MODEL, messages=messages, temperature=0, max_tokens=12)
    assert first.choices[0].message.content == again.choices[0].message.content
    p, out = again.usage.prompt_tokens, again.usage.completion_tokens
    cached = again.usage.prompt_tokens_details.cached_tokens
    assert cached == min(p // 16 * 16, p - 1) and cached > 0
    assert first.usage.prompt_tokens_details.cached_tokens < cached
    want = -(-((p - cached) * 20_000 + cached * 2_000 + out * 40_000) // 1_000_000)
    assert again.model_extra["service"]["cost_micros"] == want


def test_a_prediction_leaves_the_answer_alone_and_bills_its_rejected_tokens(client):
    """`prediction` (Predicted Outputs) drafts tokens the model verifies: the answer is the one
    greedy decoding gives without it; accepted and rejected prediction tokens are reported, and
    the rejected ones are output tokens (in `completion_tokens`, billed at the output price)."""
    args = dict(model=MODEL, messages=MESSAGES, temperature=0, max_tokens=40)
    plain = client.chat.completions.create(**args)
    text = plain.choices[0].message.content
    assert plain.usage.completion_tokens_details.accepted_prediction_tokens == 0

    right = client.chat.completions.create(prediction={"type": "content", "content": text}, **args)
    assert right.choices[0].message.content == text
    d = right.usage.completion_tokens_details
    assert d.accepted_prediction_tokens > 0 and d.rejected_prediction_tokens == 0
    assert right.usage.completion_tokens == plain.usage.completion_tokens

    wrong_text = "Berlin is the capital of Germany, and its largest city is Berlin too."
    wrong = client.chat.completions.create(
        prediction={"type": "content", "content": [{"type": "text", "text": wrong_text}]}, **args)
    d = wrong.usage.completion_tokens_details
    assert d.rejected_prediction_tokens > 0
    assert wrong.choices[0].finish_reason == "stop"
    assert wrong.choices[0].message.content == text
    assert wrong.usage.completion_tokens == plain.usage.completion_tokens + d.rejected_prediction_tokens
    p, out = wrong.usage.prompt_tokens, wrong.usage.completion_tokens
    cached = wrong.usage.prompt_tokens_details.cached_tokens
    want = -(-((p - cached) * 20_000 + cached * 2_000 + out * 40_000) // 1_000_000)
    assert wrong.model_extra["service"]["cost_micros"] == want

    stream = client.chat.completions.create(
        prediction={"type": "content", "content": wrong_text}, stream=True,
        stream_options={"include_usage": True}, **args)
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text
    assert chunks[-1].usage.completion_tokens_details.rejected_prediction_tokens == d.rejected_prediction_tokens

    with pytest.raises(openai.UnprocessableEntityError) as e:
        client.chat.completions.create(prediction={"type": "text", "content": text}, **args)
    assert e.value.param == "prediction.type"
