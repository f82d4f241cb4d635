"""The MCP server through the official `mcp` Python SDK: the streamable HTTP client against a
running tollgate's `/mcp` (real SmolLM2 weights), and the stdio client launching
`tollgate mcp --stdio`. Answers are checked against `/v1/models` and against what the ledger
actually charged for a real completion.

Started by scripts/test, which passes TOLLGATE_BASE_URL (the server's /v1), TOLLGATE_API_KEY and
TOLLGATE_BIN.
"""
import asyncio
import json
import os
import urllib.request
from decimal import Decimal
from urllib.parse import urlsplit

import httpx
import openai
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

BASE_URL = os.environ["TOLLGATE_BASE_URL"]
ORIGIN = BASE_URL.removesuffix("/v1")
MCP_URL = ORIGIN + "/mcp"
MODEL = "smollm2-135m-instruct"
MESSAGES = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is the capital of France?"},
]
TOOLS = {"list_models", "get_model", "get_prices", "estimate_cost", "language_costs",
         "search_reference", "get_reference"}


def get_json(path):
    with urllib.request.urlopen(ORIGIN + path) as r:
        return json.load(r)


def ceil_cost(prompt, completion, model):
    """The ledger's rule, written independently: ceil of micro-USD, in integers."""
    p = model["pricing"]
    num = prompt * p["input_micros_per_mtok"] + completion * p["output_micros_per_mtok"]
    return -(-num // 1_000_000)


async def call(session, name, args=None):
    r = await session.call_tool(name, args or {})
    assert not r.is_error, r.content
    assert r.structured_content is not None, f"{name}: no structured output"
    return r.structured_content


async def drive(session, *, engine=True):
    """Every tool and resource once; `engine=False` for `mcp --stdio`, which loads no model."""
    init = await session.initialize()
    assert init.server_info.name == "tollgate"
    tools = (await session.list_tools()).tools
    assert {t.name for t in tools} == TOOLS
    for t in tools:
        assert t.input_schema["type"] == "object", t.name
        assert t.output_schema and t.output_schema["type"] == "object", t.name

    listed_all = get_json("/v1/models")["data"]
    catalogue = [m for m in listed_all if "kind" not in m]  # chat models; the others have a `kind`
    speech = {m["id"]: m for m in listed_all if m.get("kind") in ("transcription", "speech")}
    embedding = {m["id"]: m for m in listed_all if m.get("kind") == "embedding"}
    assert embedding, "the catalogue has embedding models"
    by_id = {m["id"]: m for m in catalogue} | embedding

    # `list_models` lists chat and embedding models (`kind`), as `/v1/models` has them.
    listed = await call(session, "list_models")
    assert listed["count"] == len(by_id)
    assert [m["id"] for m in listed["models"]] == sorted(by_id)
    for m in listed["models"]:
        assert m["kind"] == by_id[m["id"]].get("kind", "chat")
        assert m["input_per_million_usd"] == by_id[m["id"]]["pricing"]["input_per_million_usd"]
        assert m["commercial_use"] == by_id[m["id"]]["license"]["commercial_use"]
        assert m["available"] == by_id[m["id"]]["available"], m["id"]
    only = await call(session, "list_models", {"kind": "embedding"})
    assert [m["id"] for m in only["models"]] == sorted(embedding)
    cheap = await call(session, "list_models", {"max_input_price": 0.05, "sort": "price", "commercial_use": True})
    want = sorted((m for m in by_id.values() if Decimal(m["pricing"]["input_per_million_usd"]) <= Decimal("0.05")
                   and m["license"]["commercial_use"]),
                  key=lambda m: (m["pricing"]["input_micros_per_mtok"], m["pricing"].get("output_micros_per_mtok", 0),
                                 m["id"]))
    assert [m["id"] for m in cheap["models"]] == [m["id"] for m in want]

    record = await call(session, "get_model", {"id": MODEL})
    expected = get_json(f"/v1/models/{MODEL}")
    if not engine:
        expected["loaded"] = False
    assert record == expected
    missing = await session.call_tool("get_model", {"id": "no-such-model"})
    assert missing.is_error

    prices = await call(session, "get_prices")
    assert prices["currency"] == "USD"
    assert {p["id"]: p["output_micros_per_mtok"] for p in prices["prices"]} == \
        {m["id"]: m["pricing"]["output_micros_per_mtok"] for m in catalogue}
    assert {p["id"]: (p["kind"], p["pricing"]["micros_per_unit"]) for p in prices["audio_prices"]} == \
        {i: (m["kind"], m["pricing"]["micros_per_unit"]) for i, m in speech.items()}
    assert {p["id"]: p["pricing"]["input_micros_per_mtok"] for p in prices["embedding_prices"]} == \
        {i: m["pricing"]["input_micros_per_mtok"] for i, m in embedding.items()}
    # An embedding model is estimated by its tokenizer, special tokens included, as billed:
    # all-MiniLM-L6-v2 reads "Hello there." as [CLS] hello there . [SEP].
    per_token = embedding["all-MiniLM-L6-v2"]["pricing"]["input_micros_per_mtok"]
    est = await call(session, "estimate_cost", {"model": "all-MiniLM-L6-v2", "input": "Hello there."})
    assert (est["prompt_tokens"], est["counted_by"], est["completion_tokens"]) == (5, "tokenizer", 0), est
    assert est["cost_micros"] == est["hold_micros"] == -(-5 * per_token // 1_000_000)
    # Speech models are estimated per second of audio and per character, by the billing rules.
    per_minute = speech["whisper-base"]["pricing"]["micros_per_unit"]
    est = await call(session, "estimate_cost", {"model": "whisper-base", "audio_seconds": 6.38})
    assert (est["audio_seconds"], est["cost_micros"]) == (7, -(-7 * per_minute // 60))
    per_char = speech["piper-joe-medium"]["pricing"]["micros_per_unit"]
    est = await call(session, "estimate_cost", {"model": "piper-joe-medium", "input": "Hello there."})
    assert (est["input_characters"], est["cost_micros"]) == (12, -(-12 * per_char // 1_000_000))

    langs = await call(session, "language_costs", {"model": MODEL, "language": "fra"})
    assert langs["models"][0]["model"] == MODEL
    measured = get_json(f"/v1/models/{MODEL}/languages")
    # Both servers read the committed language costs (`--data-dir`, or the default ledger's
    # directory `data/` for `mcp --stdio` started in the repository).
    assert measured["languages"], measured
    assert langs["models"][0]["languages"]["fra"]["multiplier"] == measured["languages"]["fra"]["multiplier"]

    hits = await call(session, "search_reference", {"query": "Idempotency-Key retry"})
    assert hits["results"][0]["id"] == "idempotency"
    page = await call(session, "get_reference", {"id": hits["results"][0]["id"]})
    assert "Idempotency-Key" in page["markdown"]
    resources = (await session.list_resources()).resources
    uris = {str(r.uri) for r in resources}
    assert "tollgate://openapi.json" in uris and "tollgate://reference/errors" in uris
    doc = await session.read_resource("tollgate://openapi.json")
    assert json.loads(doc.contents[0].text)["openapi"] == "3.1.0"
    return by_id


def test_mcp_over_streamable_http_matches_the_api_and_the_ledger(caplog):
    async def run():
        async with streamable_http_client(MCP_URL) as (read, write):
            async with ClientSession(read, write) as session:
                by_id = await drive(session)
                # A real completion, then the estimate for the same messages and output length:
                # the same prompt tokens (the loaded model's template and tokenizer) and the
                # same micros the ledger charged.
                client = openai.OpenAI(base_url=BASE_URL, api_key=os.environ["TOLLGATE_API_KEY"], max_retries=0)
                r = client.chat.completions.create(model=MODEL, messages=MESSAGES, temperature=0, max_tokens=12)
                est = await call(session, "estimate_cost", {
                    "model": MODEL, "messages": MESSAGES, "max_tokens": 12,
                    "expected_output_tokens": r.usage.completion_tokens})
                assert est["counted_by"] == "chat template + tokenizer"
                # The up-front hold of that request: every prompt token plus max_tokens.
                assert est["hold_micros"] == ceil_cost(r.usage.prompt_tokens, 12, by_id[MODEL])
                assert est["fits_context"] and est["warning"] is None
                assert est["prompt_tokens"] == r.usage.prompt_tokens
                assert est["cost_micros"] == r.model_extra["service"]["cost_micros"]
                assert est["cost_micros"] == ceil_cost(r.usage.prompt_tokens, r.usage.completion_tokens, by_id[MODEL])
                given = await call(session, "estimate_cost", {
                    "model": MODEL, "prompt_tokens": 123_456, "expected_output_tokens": 7_890})
                assert given["cost_micros"] == ceil_cost(123_456, 7_890, by_id[MODEL])
                assert not given["fits_context"] and "context_length_exceeded" in given["warning"]
    asyncio.run(run())
    # The session's DELETE on close is answered as the SDK expects: no warning.
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert not [w for w in warnings if "Session termination failed" in w], warnings


def test_mcp_over_stdio():
    params = StdioServerParameters(command=os.environ["TOLLGATE_BIN"], args=["mcp", "--stdio"],
                                   cwd=os.environ.get("TOLLGATE_ROOT", os.getcwd()))

    async def run():
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await drive(session, engine=False)
                # No engine here: the chat template and tokenizer read from the model's GGUF file
                # count the prompt, so the count is the one a real request is billed for.
                est = await call(session, "estimate_cost", {"model": MODEL, "messages": MESSAGES})
                assert est["counted_by"] == "chat template + tokenizer" and est["tokenizer"].startswith("gguf:")
                client = openai.OpenAI(base_url=BASE_URL, api_key=os.environ["TOLLGATE_API_KEY"], max_retries=0)
                r = client.chat.completions.create(model=MODEL, messages=MESSAGES, temperature=0, max_tokens=1)
                assert est["prompt_tokens"] == r.usage.prompt_tokens
    asyncio.run(run())


def test_a_foreign_host_or_origin_is_refused():
    body = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "rebinding-test", "version": "0"}}}
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    port = urlsplit(ORIGIN).port
    evil = httpx.post(MCP_URL, json=body, headers={**headers, "Host": f"evil.example:{port}"})
    assert evil.status_code == 403
    ok = httpx.post(MCP_URL, json=body, headers={**headers, "Host": f"localhost:{port}"})
    assert ok.status_code == 200
    # A page on another site cannot call it from a browser either.
    cross = httpx.post(MCP_URL, json=body, headers={**headers, "Origin": "https://evil.example"})
    assert cross.status_code == 403
    same = httpx.post(MCP_URL, json=body, headers={**headers, "Origin": ORIGIN})
    assert same.status_code == 200
