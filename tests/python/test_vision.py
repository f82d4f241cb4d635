"""Images through the official `openai` Python SDK (and, from here, the Node SDK:
tests/node/vision.mjs) on the tiny vision fixture models (`tests/data/vision/`, made by
scripts/fixtures/vision-fixtures.py): a chat request and a Responses request with a `data:` URL image
return 200 with the reference prompt's token count (image tokens included) and an exact charge;
the same image to a text-only model is 400 `image_not_supported` naming the part; a remote URL
is refused. This module starts its own server on the fixture catalogue and its own ledger
(TOLLGATE_BIN), so the shared server and its accounts are untouched.
"""
import base64
import json
import os
import pathlib
import re
import subprocess

import openai
import pytest

from own_server import own_server, run

ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "vision"
# tests/data/vision/models.toml prices every model at 0.5 / 1.5 USD per 1M tokens.
INPUT_PRICE, OUTPUT_PRICE = 500_000, 1_500_000


def reference(family):
    return json.loads((DATA / family / "reference.json").read_text())


def data_url(family, item):
    png = (DATA / family / item["file"]).read_bytes()
    return "data:image/png;base64," + base64.b64encode(png).decode()


@pytest.fixture(scope="module")
def vision():
    args = ["--models", str(DATA / "models.toml"), "--weights", str(DATA),
            "--load", "gemma3,smolvlm,text-only", "--threads", "1"]
    with own_server("vision@example.com", args) as (base_url, key, db):
        client = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=120)
        client.tollgate_key = key
        client.tollgate_db = db
        yield client


def balance(client):
    out = run("accounts", "show", "--account", "vision@example.com", "--db", client.tollgate_db).stdout
    return int(re.search(r"^balance .*\((-?\d+) micros\)", out, re.M).group(1))


def cost(prompt_tokens, cached, completion_tokens):
    # docs/reference/costs.md: cached tokens at a tenth of the input price, one rounding up.
    num = (prompt_tokens - cached) * INPUT_PRICE + cached * (INPUT_PRICE // 10) + completion_tokens * OUTPUT_PRICE
    return -(-num // 1_000_000)


def image_message(url):
    return [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": url, "detail": "auto"}},
        {"type": "text", "text": "Describe this."}]}]


@pytest.mark.parametrize("family", ["gemma3", "smolvlm"])
def test_chat_with_an_image_counts_its_tokens_and_charges_exactly(vision, family):
    item = reference(family)["images"][1]  # the 120x48 landscape image
    before = balance(vision)
    r = vision.chat.completions.create(model=family, messages=image_message(data_url(family, item)),
                                       max_tokens=5, temperature=0)
    assert r.usage.prompt_tokens == item["n_tokens"], r.usage
    assert r.usage.completion_tokens == 5, r.usage
    cached = r.usage.prompt_tokens_details.cached_tokens if r.usage.prompt_tokens_details else 0
    assert before - balance(vision) == cost(r.usage.prompt_tokens, cached or 0, 5)


def test_responses_take_input_image(vision):
    item = reference("gemma3")["images"][2]  # the 50x130 portrait image
    before = balance(vision)
    r = vision.responses.create(model="gemma3", max_output_tokens=5, temperature=0, input=[
        {"role": "user", "content": [
            {"type": "input_image", "image_url": data_url("gemma3", item), "detail": "high"},
            {"type": "input_text", "text": "Describe this."}]}])
    assert r.usage.input_tokens == item["n_tokens"], r.usage
    cached = r.usage.input_tokens_details.cached_tokens
    assert before - balance(vision) == cost(r.usage.input_tokens, cached, r.usage.output_tokens)


def test_images_are_refused_by_part_and_cost_nothing(vision):
    item = reference("gemma3")["images"][0]
    before = balance(vision)
    cases = [("text-only", data_url("gemma3", item), "image_not_supported"),
             ("gemma3", "https://127.0.0.1/cat.png", "image_url_not_allowed"),
             ("gemma3", "http://10.0.0.1/cat.png", "image_url_not_allowed"),
             ("gemma3", "data:image/png;base64,bm90IGFuIGltYWdl", "invalid_image")]
    for model, url, code in cases:
        with pytest.raises(openai.BadRequestError) as e:
            vision.chat.completions.create(model=model, messages=image_message(url), max_tokens=5)
        assert e.value.body["code"] == code, e.value.body
        assert e.value.body["param"] == "messages[0].content[0]", e.value.body
    assert balance(vision) == before


def test_the_node_sdk_sends_images(vision):
    """tests/node/vision.mjs: a chat and a Responses request with an image, and the refusal."""
    env = dict(os.environ, TOLLGATE_BASE_URL=str(vision.base_url).rstrip("/"),
               TOLLGATE_API_KEY=vision.tollgate_key)
    out = subprocess.run(["node", str(ROOT / "tests" / "node" / "vision.mjs")], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    item = reference("smolvlm")["images"][0]
    assert result["chat_prompt_tokens"] == item["n_tokens"], result
    assert result["responses_input_tokens"] == item["n_tokens"], result
    assert result["refused"] == "image_not_supported", result
