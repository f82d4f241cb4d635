"""The set `scripts/serve` serves with no arguments answers every endpoint with a real model.

Run by scripts/test against `scripts/serve` (debug build); not collected by pytest (one server,
started by the script, with its own ledger). Checks, through the official `openai` SDK:
chat (SmolLM2-135M), a tool call under `tool_choice: auto` (Qwen2.5-Coder-1.5B), transcription
(whisper-base on tests/fixtures/speech/fox.wav), speech (Piper) and embeddings (MiniLM); then
that the start-up banner names the API URL and the key file, that its `curl` line, run as
printed, answers, and that the log (a file) has no escape codes and no warning twice.

Usage: served_set.py BASE_URL KEY_FILE SERVE_LOG
"""

import json
import pathlib
import subprocess
import sys
import time

import openai

FOX = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "speech" / "fox.wav"

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


def main(base: str, key_file: str, log_path: str) -> None:
    key = pathlib.Path(key_file).read_text().strip()
    client = openai.OpenAI(base_url=f"{base}/v1", api_key=key, max_retries=0, timeout=300)

    chat = client.chat.completions.create(
        model="smollm2-135m-instruct",
        messages=[{"role": "user", "content": "Say hello."}],
        max_tokens=8,
    )
    assert chat.choices[0].message.content, chat
    assert chat.usage.completion_tokens > 0, chat.usage
    print("chat:", repr(chat.choices[0].message.content))

    tools = client.chat.completions.create(
        model="qwen2.5-coder-1.5b-instruct",
        messages=[{"role": "user", "content": "What is the weather in Paris right now?"}],
        tools=[WEATHER],
        tool_choice="auto",
        max_tokens=48,
        temperature=0,
    )
    choice = tools.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    call = choice.message.tool_calls[0]
    assert call.function.name == "get_weather", call
    assert "paris" in json.loads(call.function.arguments)["city"].lower(), call
    print("tool call:", call.function.name, call.function.arguments)

    with FOX.open("rb") as f:
        text = client.audio.transcriptions.create(model="whisper-base", file=f).text
    assert "fox" in text.lower(), text
    print("transcription:", repr(text))

    speech = client.audio.speech.create(
        model="piper-joe-medium", voice="joe", input="Hello there.", response_format="wav"
    )
    audio = speech.read()
    assert audio[:4] == b"RIFF" and len(audio) > 8000, len(audio)
    print("speech:", len(audio), "bytes of WAV")

    emb = client.embeddings.create(model="all-MiniLM-L6-v2", input=["a cat", "a kitten"])
    assert len(emb.data) == 2 and len(emb.data[0].embedding) == 384, emb
    print("embeddings:", len(emb.data), "x", len(emb.data[0].embedding))

    banner(base, key_file, log_path)


def banner(base: str, key_file: str, log_path: str) -> None:
    """The banner names the API base URL and the key file; its curl line answers as printed."""
    deadline = time.time() + 30
    while "tollgate is up." not in (log := pathlib.Path(log_path).read_text()):
        assert time.time() < deadline, log
        time.sleep(0.2)
    assert f"{base}/v1" in log and key_file in log, log
    assert "\x1b" not in log, "escape codes in a log written to a file"
    warnings = [line.split(" WARN ", 1)[1] for line in log.splitlines() if " WARN " in line]
    assert len(warnings) == len(set(warnings)), f"a start-up warning repeated: {warnings}"
    curl = next(line for line in log.splitlines() if line.startswith("curl "))
    out = subprocess.run(["bash", "-c", curl], capture_output=True, text=True, timeout=120, check=True)
    answer = json.loads(out.stdout)
    assert answer["choices"][0]["message"]["content"], answer
    print("banner curl:", repr(answer["choices"][0]["message"]["content"]))


if __name__ == "__main__":
    main(*sys.argv[1:4])
