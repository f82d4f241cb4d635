"""Speech to text through the official `openai` Python SDK: `client.audio.transcriptions` and
`client.audio.translations` against whisper-base (real weights, `scripts/fetch-weights whisper`),
on a WAV espeak-ng said (tests/fixtures/speech/fox.wav, 6.38 s). Billing: 600 micro-USD per
minute, billed in whole seconds rounded up: 7 s -> ceil(7 * 600 / 60) = 70 micros.
"""
import os
import pathlib
import re
import uuid

import openai
import pytest
from ledger import balance_micros

BASE_URL = os.environ["TOLLGATE_BASE_URL"]
FOX = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "speech" / "fox.wav"
REFERENCE = "The quick brown fox jumps over the lazy dog. Speech recognition turns spoken words into written text."
COST = 70  # ceil(ceil(6.38 s) * 600 / 60)


@pytest.fixture(scope="module")
def client():
    return openai.OpenAI(base_url=BASE_URL, api_key=os.environ["TOLLGATE_API_KEY"], max_retries=0)


def words(s):
    return [w for w in re.sub(r"[^a-z0-9 ]", " ", s.lower()).split()]


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


def test_json_transcription_is_billed_per_second(client):
    before = balance_micros("sdk@example.com")
    raw = client.audio.transcriptions.with_raw_response.create(file=FOX.open("rb"), model="whisper-base")
    t = raw.parse()
    # espeak-ng's voice is hard for whisper-base: faster-whisper (same weights, greedy) also
    # hears "Each recognition turns broken words"; Piper's voice is the round-trip test.
    assert wer(REFERENCE, t.text) <= 0.3, t.text
    assert "lazy dog" in t.text
    service = t.model_extra["service"]
    assert service["cost_micros"] == COST
    assert service["request_id"] == raw.http_response.headers["x-request-id"]
    assert (t.usage.type, t.usage.seconds) == ("duration", 7)
    assert balance_micros("sdk@example.com") == before - COST


def test_srt_and_vtt_are_subtitles_with_the_cost_in_a_header(client):
    raw = client.audio.transcriptions.with_raw_response.create(
        file=FOX.open("rb"), model="whisper-base", response_format="srt")
    srt = raw.parse()
    assert isinstance(srt, str)
    assert re.match(r"1\n00:00:00,000 --> 00:00:0\d,\d{3}\n\S", srt), srt
    assert raw.http_response.headers["x-tollgate-cost-micros"] == str(COST)
    vtt = client.audio.transcriptions.create(file=FOX.open("rb"), model="whisper-base", response_format="vtt")
    assert vtt.startswith("WEBVTT\n\n00:00:00.000 --> ")
    text = client.audio.transcriptions.create(file=FOX.open("rb"), model="whisper-base", response_format="text")
    assert "lazy dog" in text


def test_verbose_json_has_language_duration_and_ordered_segments(client):
    t = client.audio.transcriptions.create(
        file=FOX.open("rb"), model="whisper-base", response_format="verbose_json",
        timestamp_granularities=["segment"])
    assert t.language == "english"
    assert abs(t.duration - 6.38) < 0.01
    assert len(t.segments) >= 1
    assert all(a.end <= b.start + 1e-9 for a, b in zip(t.segments, t.segments[1:]))
    assert t.segments[-1].end <= t.duration + 0.5
    assert "".join(s.text for s in t.segments).strip() == t.text


def test_translation_gives_english(client):
    t = client.audio.translations.create(file=FOX.open("rb"), model="whisper-base")
    assert "dog" in t.text.lower()


def test_idempotent_retry_with_another_boundary_is_charged_once(client):
    key = f"audio-{uuid.uuid4()}"
    before = balance_micros("sdk@example.com")
    first = client.audio.transcriptions.with_raw_response.create(
        file=FOX.open("rb"), model="whisper-base", extra_headers={"Idempotency-Key": key})
    second = client.audio.transcriptions.with_raw_response.create(
        file=FOX.open("rb"), model="whisper-base", extra_headers={"Idempotency-Key": key})
    assert second.http_response.headers["idempotent-replayed"] == "true"
    assert first.parse().text == second.parse().text
    assert balance_micros("sdk@example.com") == before - COST


@pytest.mark.parametrize("kwargs,param,code,status", [
    ({"file": ("notes.txt", b"not audio at all, just some text")}, "file", "unsupported_audio_format", 400),
    ({"file": ("empty.wav", b"")}, "file", "missing_file", 400),
    ({"file": ("fox.wav", FOX.read_bytes()), "language": "klingon"}, "language", "unsupported_language", 400),
    ({"file": ("fox.wav", FOX.read_bytes()), "timestamp_granularities": ["word"]}, "timestamp_granularities[]",
     "unsupported_timestamp_granularity", 400),
    ({"file": ("fox.wav", FOX.read_bytes()), "response_format": "xml"}, "response_format", "invalid_response_format", 400),
    ({"file": ("big.wav", b"\0" * (25 * 1024 * 1024 + 1))}, "file", "file_too_large", 413),
])
def test_rejected_requests_name_the_field_and_cost_nothing(client, kwargs, param, code, status):
    before = balance_micros("sdk@example.com")
    with pytest.raises(openai.APIStatusError) as e:
        client.audio.transcriptions.create(model="whisper-base", **kwargs)
    assert e.value.status_code == status
    err = e.value.body
    assert (err["param"], err["code"], err["type"]) == (param, code, "invalid_request_error"), err
    assert balance_micros("sdk@example.com") == before


def test_a_chat_model_does_not_transcribe_and_a_poor_account_gets_402(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.audio.transcriptions.create(model="smollm2-135m-instruct", file=FOX.open("rb"))
    assert e.value.body["param"] == "model"
    poor = openai.OpenAI(base_url=BASE_URL, api_key=os.environ["TOLLGATE_POOR_KEY"], max_retries=0)
    with pytest.raises(openai.APIStatusError) as e:
        poor.audio.transcriptions.create(model="whisper-base", file=FOX.open("rb"))
    assert e.value.status_code == 402
    assert e.value.body["details"]["required_micros"] == COST
