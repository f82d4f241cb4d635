"""Scenario 6 of scripts/soak/run: every integer/number field in GET /v1/openapi.json gets each
of SWEEP_VALUES in an otherwise minimal valid request; no 5xx, every 4xx an error envelope.
Owns the schema walk, the minimal bodies, the request building and the sweep's report.
"""
import collections
import concurrent.futures as cf
import io
import json
import os
import time
import wave

from soak_scenarios import MODEL, envelope_problem, request, say

SWEEP_VALUES = ["0", "1", "-1", str(2**31), str(2**53), str(2**63 - 1), str(2**64 - 1),
                str(2**64), str(-(2**63)), "1.5", "-0.5", "1e308", "1e400", "1e3", '"12"']
# Fields of operations whose request body has no schema in the OpenAPI document, taken from
# their descriptions: (method, path) -> [(location, field)].
UNDOCUMENTED_FIELDS = {
    ("post", "/v1/audio/speech"): [("json", ("speed",))],
    ("post", "/v1/audio/transcriptions"): [("form", ("temperature",))],
    ("post", "/v1/audio/translations"): [("form", ("temperature",))],
}
VALUE_MARK = "@@soak-value@@"


# ---------------------------------------------------------------- 6 numeric sweep

def walk_schema(doc, schema, path, out, depth=0):
    """Appends to `out` the path (names, 0 for an array element) of every integer/number."""
    if depth > 16 or not isinstance(schema, dict):
        return
    if "$ref" in schema:
        target = doc
        for part in schema["$ref"].lstrip("#/").split("/"):
            target = target.get(part, {})
        walk_schema(doc, target, path, out, depth + 1)
    types = schema.get("type") or []
    types = [types] if isinstance(types, str) else types
    if ("integer" in types or "number" in types) and tuple(path) not in out:
        out.append(tuple(path))
    for key in ("anyOf", "oneOf", "allOf"):
        for sub in schema.get(key) or []:
            walk_schema(doc, sub, path, out, depth + 1)
    for name, sub in (schema.get("properties") or {}).items():
        walk_schema(doc, sub, path + [name], out, depth + 1)
    if isinstance(schema.get("items"), dict):
        walk_schema(doc, schema["items"], path + [0], out, depth + 1)


def numeric_fields(doc):
    """[(method, path, location, field path)] of every operation's numeric inputs, and notes."""
    fields, notes = [], []
    for path, item in doc.get("paths", {}).items():
        for method, op in item.items():
            if method not in ("get", "post", "put", "patch", "delete"):
                continue
            for param in (item.get("parameters") or []) + (op.get("parameters") or []):
                found = []
                walk_schema(doc, param.get("schema") or {}, [], found)
                if found and param.get("in") in ("query", "path"):
                    fields.append((method, path, param["in"], (param["name"],)))
            for ctype, content in ((op.get("requestBody") or {}).get("content") or {}).items():
                loc = "form" if "multipart" in ctype else "json"
                if "schema" not in content:
                    extra = UNDOCUMENTED_FIELDS.get((method, path), [])
                    notes.append(f"{method.upper()} {path} ({ctype}) has no schema; fields from "
                                 f"its description: {','.join(f[1][0] for f in extra) or 'none'}")
                    fields += [(method, path, l, f) for l, f in extra]
                    continue
                found = []
                walk_schema(doc, content["schema"], [], found)
                fields += [(method, path, loc, f) for f in found if f]
    return fields, notes


def tiny_wav():
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(b"\0\0" * 8000)
    return buf.getvalue()


def base_body(method, path, models):
    """A minimal valid body for a known operation (None: no body; KeyError: unknown)."""
    if method in ("get", "delete"):
        return None
    return {
        "/v1/chat/completions": lambda: {"model": MODEL, "max_tokens": 1, "temperature": 0,
                                         "messages": [{"role": "user", "content": "hi"}]},
        "/v1/completions": lambda: {"model": MODEL, "prompt": "hi", "max_tokens": 1,
                                    "temperature": 0},
        "/v1/responses": lambda: {"model": MODEL, "input": "hi", "max_output_tokens": 1,
                                  "temperature": 0, "store": False},
        "/v1/audio/speech": lambda: {"model": models["speech"], "input": "hi", "voice": "alloy"},
        "/v1/audio/transcriptions": lambda: {"model": models["transcription"]},
        "/v1/audio/translations": lambda: {"model": models["transcription"]},
    }[path]()


def place(body, field, value):
    """Sets `field` (names, 0 for the first array element) in `body`, making containers."""
    node = body
    for part, nxt in zip(field, field[1:]):
        blank = [] if isinstance(nxt, int) else {}
        if isinstance(part, int):
            if not node:
                node.append(blank)
            elif not isinstance(node[0], type(blank)):
                node[0] = blank
        elif not isinstance(node.get(part), type(blank)):
            node[part] = blank
        node = node[part]
    if isinstance(field[-1], int):
        node[:1] = [value]
    else:
        node[field[-1]] = value


def multipart(fields, wav):
    boundary = "soak" + os.urandom(8).hex()
    out = b"".join(f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'
                   .encode() for k, v in fields.items())
    out += (f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="soak.wav"'
            f'\r\nContent-Type: audio/wav\r\n\r\n').encode() + wav + f"\r\n--{boundary}--\r\n".encode()
    return out, f"multipart/form-data; boundary={boundary}"


def build_case(case, token, key, models, wav):
    """(METHOD, url, body bytes or None, headers) for one sweep case; KeyError if the
    operation has no known minimal body."""
    method, path, loc, field = case
    body = base_body(method, path, models)
    headers = {"Authorization": f"Bearer {key}"}
    bare = token.strip('"')
    url = path.replace("{%s}" % field[0], bare) if loc == "path" else path
    while "{" in url:
        url = url[:url.index("{")] + MODEL + url[url.index("}") + 1:]
    if loc == "query":
        url += f"?{field[0]}={bare}"
    data = None
    if loc == "form":
        body[field[0]] = bare
        data, headers["Content-Type"] = multipart(body, wav)
    elif body is not None:
        if loc == "json":
            place(body, field, VALUE_MARK)
        data = json.dumps(body).replace(f'"{VALUE_MARK}"', token).encode()
        headers["Content-Type"] = "application/json"
    return method.upper(), url, data, headers


def audio_models(port):
    """Ids of a speech and a transcription model from GET /v1/models (None if absent)."""
    _, body = request(port, "GET", "/v1/models")
    found = {"speech": None, "transcription": None}
    for m in json.loads(body).get("data", []):
        if m.get("kind") in found and found[m["kind"]] is None:
            found[m["kind"]] = m["id"]
    return found


def run_sweep_case(port, built):
    method, url, data, headers = built
    try:
        return request(port, method, url, data, headers, timeout=120)
    except OSError as e:
        return None, type(e).__name__.encode()


def scenario_sweep(server):
    _, raw = request(server.port, "GET", "/v1/openapi.json")
    doc = json.loads(raw)
    fields, notes = numeric_fields(doc)
    models, wav = audio_models(server.port), tiny_wav()
    jobs, skipped = [], collections.Counter()
    for case in fields:
        for token in SWEEP_VALUES:
            try:
                jobs.append((case, token, build_case(case, token, server.key, models, wav)))
            except KeyError:
                skipped[f"{case[0].upper()} {case[1]} {'.'.join(map(str, case[3]))}"] += 1
    for note in notes:
        print(f"soak: sweep-note: {note}", flush=True)
    for what, n in skipped.items():
        print(f"soak: sweep-note: skipped {what} ({n} cases): no minimal body known", flush=True)
    t0 = time.monotonic()
    with cf.ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda j: run_sweep_case(server.port, j[2]), jobs))
    failures, classes = [], collections.Counter()
    for (case, token, _), (status, body) in zip(jobs, answers):
        classes[f"{status // 100}xx" if status else "none"] += 1
        problem = ("no answer" if status is None else "5xx" if status >= 500
                   else envelope_problem(status, body))
        if problem:
            failures.append((case, token, status, body, problem))
    fivexx = sum(1 for f in failures if f[4] == "5xx")
    non_env = sum(1 for f in failures if f[4] not in ("5xx", "no answer"))
    say("sweep", operations=len({c[:2] for c in fields}), fields=len(fields),
        values=len(SWEEP_VALUES), cases=len(jobs), classes=dict(classes), fivexx=fivexx,
        non_envelope=non_env, no_answer=len(failures) - fivexx - non_env,
        secs=time.monotonic() - t0)
    for (method, path, loc, field), token, status, body, problem in failures:
        print(f"soak: sweep-failure: {method.upper()} {path} {loc}:{'.'.join(map(str, field))}"
              f" value={token} status={status} problem={problem!r}"
              f" body={body[:200].decode('utf-8', 'replace')!r}", flush=True)
    return {"fivexx": fivexx, "non_envelope": non_env, "no_answer": len(failures) - fivexx - non_env}
