"""What every Python suite checks of every answer, whatever the test: no 4xx or 5xx body
carries panic text (`panicked`, a tokio `JoinError`), so a panic inside the server can never
reach a tenant as an error message (issue 72). httpx is what the openai, LangChain, instructor
and MCP clients send through, so wrapping its `send` sees every answer they get."""

import httpx
import pytest

PANIC_MARKS = (b"panicked", b"JoinError")


def _check(response):
    if response.status_code >= 400:
        body = response.content
        for mark in PANIC_MARKS:
            assert mark not in body, f"{response.status_code} body carries {mark!r}: {body[:300]!r}"


@pytest.fixture(autouse=True)
def no_panic_text_in_error_bodies(monkeypatch):
    send, asend = httpx.Client.send, httpx.AsyncClient.send

    def checked_send(self, request, **kwargs):
        response = send(self, request, **kwargs)
        if response.status_code >= 400:
            response.read()
            _check(response)
        return response

    async def checked_asend(self, request, **kwargs):
        response = await asend(self, request, **kwargs)
        if response.status_code >= 400:
            await response.aread()
            _check(response)
        return response

    monkeypatch.setattr(httpx.Client, "send", checked_send)
    monkeypatch.setattr(httpx.AsyncClient, "send", checked_asend)
    yield
