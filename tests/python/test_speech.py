"""Text to speech through the official `openai` Python SDK: `client.audio.speech.create` on
Piper's en_US joe voice (real weights, `scripts/fetch-weights piper`, and `espeak-ng`), then the
round trip: whisper-base transcribes what the voice said. Billing: 1.00 USD per 1M input
characters = 1 micro-USD per character, `ceil(characters * 1_000_000 / 1_000_000)`.
"""
import os
import re
import uuid

import openai
import pytest
from ledger import balance_micros

BASE_URL = os.environ["TOLLGATE_BASE_URL"]
MODEL = "piper-joe-medium"
PARAGRAPH = ("Good morning. The weather today is sunny and warm, with a light breeze from the west. "
             "Please remember to bring your umbrella tomorrow, because it will rain in the afternoon.")
COST = len(PARAGRAPH)  # 1 micro-USD per character


@pytest.fixture(scope="module")
def client():
    return openai.OpenAI(base_url=BASE_URL, api_key=os.environ["TOLLGATE_API_KEY"], max_retries=0)


def words(s):
    return re.sub(r"[^a-z0-9 ]", " ", s.lower()).split()


def wer(ref, hyp):
    r, h = words(ref), words(hyp)
    d = list(range(len(h) + 1))
    for i in range(1, len(r) + 1):
        prev, d[0] = d[0], i
        for j in range(1, len(h) + 1):
            cur = d[j]
            d[j] = min(prev + (r[i - 1] != h[j - 1]), d[j] + 1, d[j - 1] + 1)
            prev = cur
    return d[len(h)] / len(r)


@pytest.mark.parametrize("fmt,content_type,name", [
    (None, "audio/mpeg", "speech.mp3"),  # the SDK's default format: mp3
    ("wav", "audio/wav", "speech.wav"),
])
def test_speech_round_trips_through_transcription_and_is_billed_per_character(client, fmt, content_type, name):
    before = balance_micros("sdk@example.com")
    kwargs = {"response_format": fmt} if fmt else {}
    raw = client.audio.speech.with_raw_response.create(model=MODEL, voice="alloy", input=PARAGRAPH, **kwargs)
    assert raw.http_response.headers["content-type"] == content_type
    assert int(raw.http_response.headers["x-tollgate-cost-micros"]) == COST
    assert raw.http_response.headers["x-request-id"].startswith("req_")
    audio = raw.parse().content
    assert len(audio) > 10_000
    assert balance_micros("sdk@example.com") == before - COST
    t = client.audio.transcriptions.create(file=(name, audio), model="whisper-base", language="en")
    assert wer(PARAGRAPH, t.text) <= 0.15, t.text


def test_pcm_is_24_khz_16_bit_and_speed_shortens_it(client):
    slow = client.audio.speech.create(model=MODEL, voice="joe", input="One, two, three, four.", response_format="pcm")
    fast = client.audio.speech.create(model=MODEL, voice="joe", input="One, two, three, four.", response_format="pcm",
                                      speed=2.0)
    assert len(slow.content) % 2 == 0
    seconds = len(slow.content) / 2 / 24_000
    assert 0.8 < seconds < 5, seconds
    assert len(fast.content) < 0.75 * len(slow.content)


def test_an_idempotent_retry_replays_the_audio_and_is_charged_once(client):
    key = f"speech-{uuid.uuid4()}"
    before = balance_micros("sdk@example.com")
    first = client.audio.speech.with_raw_response.create(
        model=MODEL, voice="echo", input="Hello there.", response_format="flac", extra_headers={"Idempotency-Key": key})
    second = client.audio.speech.with_raw_response.create(
        model=MODEL, voice="echo", input="Hello there.", response_format="flac", extra_headers={"Idempotency-Key": key})
    assert second.http_response.headers["idempotent-replayed"] == "true"
    assert second.http_response.headers["content-type"] == "audio/flac"
    assert first.parse().content == second.parse().content
    assert first.parse().content[:4] == b"fLaC"
    assert balance_micros("sdk@example.com") == before - len("Hello there.")


@pytest.mark.parametrize("kwargs,param,code,status", [
    ({"voice": "darth"}, "voice", "unsupported_voice", 400),
    ({"voice": "alloy", "response_format": "opus"}, "response_format", "unsupported_response_format", 400),
    ({"voice": "alloy", "response_format": "aac"}, "response_format", "unsupported_response_format", 400),
    ({"voice": "alloy", "input": "x" * 4097}, "input", "invalid_request", 422),
    ({"voice": "alloy", "speed": 5}, "speed", "invalid_request", 422),
    ({"voice": "alloy", "instructions": "Speak like a pirate."}, "instructions", "unsupported_parameter", 400),
    ({"voice": "alloy", "model": "whisper-base"}, "model", "model_not_supported", 400),
    ({"voice": "alloy", "model": "smollm2-135m-instruct"}, "model", "model_not_supported", 400),
])
def test_rejected_speech_requests_name_the_field_and_cost_nothing(client, kwargs, param, code, status):
    before = balance_micros("sdk@example.com")
    args = {"model": MODEL, "input": "Hello.", **kwargs}
    with pytest.raises(openai.APIStatusError) as e:
        client.audio.speech.create(**args)
    assert e.value.status_code == status
    err = e.value.body
    assert (err["param"], err["code"]) == (param, code), err
    assert balance_micros("sdk@example.com") == before


def test_a_poor_account_gets_402_before_any_synthesis():
    poor = openai.OpenAI(base_url=BASE_URL, api_key=os.environ["TOLLGATE_POOR_KEY"], max_retries=0)
    with pytest.raises(openai.APIStatusError) as e:
        poor.audio.speech.create(model=MODEL, voice="alloy", input=PARAGRAPH)
    assert e.value.status_code == 402
    assert e.value.body["details"]["required_micros"] == COST


def test_models_list_shows_speech_models_with_their_unit_price(client):
    by_id = {m.id: m.model_extra for m in client.models.list()}
    tts, stt = by_id[MODEL], by_id["whisper-base"]
    assert (tts["kind"], tts["pricing"]["unit"], tts["pricing"]["micros_per_unit"]) == ("speech", "1M characters", 1_000_000)
    assert tts["available"] is True and tts["voices"] == ["joe"]
    assert (stt["kind"], stt["pricing"]["unit"], stt["pricing"]["per_unit_usd"]) == ("transcription", "minute", "0.0006")
    assert client.models.retrieve(MODEL).model_extra["architecture"]["output_modalities"] == ["audio"]
