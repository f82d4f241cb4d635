// The playground's conversation: the messages so far, a streamed reply read from server-sent
// events (content, reasoning and tool-call deltas), a stop that aborts the request, and the
// figures of each turn (tokens, cached tokens, cost, time to first token).
import { h, api, usd } from "./core.js";

// One conversation: `messages` in the API's form, and per assistant turn what it cost.
export function conversation() {
  return { messages: [], turns: [], controller: null };
}

// The request body for `messages` under the panel settings `opts`.
export function requestBody(model, messages, opts) {
  const body = { model, messages, stream: true, stream_options: { include_usage: true } };
  if (opts.max_tokens) body.max_tokens = opts.max_tokens;
  if (opts.temperature != null) body.temperature = opts.temperature;
  if (opts.reasoning_effort) body.reasoning_effort = opts.reasoning_effort;
  if (opts.tools && opts.tools.length) {
    body.tools = opts.tools;
    if (opts.tool_choice && opts.tool_choice !== "auto") body.tool_choice = opts.tool_choice;
  }
  if (opts.schema) {
    body.response_format = { type: "json_schema", json_schema: { name: "answer", strict: true, schema: opts.schema } };
  }
  return body;
}

// Folds tool-call deltas (`index`, then `id`, `function.name`, pieces of `arguments`) into calls.
function addToolDeltas(calls, deltas) {
  for (const d of deltas) {
    const c = (calls[d.index] ||= { id: "", type: "function", function: { name: "", arguments: "" } });
    if (d.id) c.id = d.id;
    if (d.function && d.function.name) c.function.name += d.function.name;
    if (d.function && d.function.arguments) c.function.arguments += d.function.arguments;
  }
}

// Reads the events of a streamed reply into `view` (its `content`, `reasoning` and `calls`
// elements); returns the assistant message and the last chunk's usage and cost.
async function readStream(r, view, started) {
  const reader = r.body.getReader();
  const dec = new TextDecoder();
  const out = { content: "", reasoning: "", calls: [], usage: null, service: null, finish: null, ttft: null };
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return out;
    buf += dec.decode(value, { stream: true });
    let i;
    while ((i = buf.indexOf("\n\n")) >= 0) {
      const event = buf.slice(0, i);
      buf = buf.slice(i + 2);
      for (const line of event.split("\n")) {
        if (!line.startsWith("data: ") || line === "data: [DONE]") continue;
        const c = JSON.parse(line.slice(6));
        if (c.error) throw new Error(c.error.message);
        const choice = c.choices && c.choices[0];
        const delta = choice && choice.delta;
        if (delta && (delta.content || delta.reasoning_content || delta.tool_calls) && out.ttft == null) {
          out.ttft = Math.round(performance.now() - started);
        }
        if (delta && delta.reasoning_content) {
          out.reasoning += delta.reasoning_content;
          view.reasoning.hidden = false;
          view.reasoningText.textContent = out.reasoning;
        }
        if (delta && delta.content) {
          out.content += delta.content;
          view.content.textContent = out.content;
        }
        if (delta && delta.tool_calls) {
          addToolDeltas(out.calls, delta.tool_calls);
          view.calls.replaceChildren(...out.calls.map((t) => h("pre", { class: "tool-call" },
            `${t.function.name}(${t.function.arguments})`)));
        }
        if (choice && choice.finish_reason) out.finish = choice.finish_reason;
        if (c.usage) out.usage = c.usage;
        if (c.service) out.service = c.service;
      }
    }
  }
}

// What one assistant turn cost, as a line of text.
export function turnFigures(t) {
  if (!t.usage) return t.note || "";
  const cached = (t.usage.prompt_tokens_details && t.usage.prompt_tokens_details.cached_tokens) || 0;
  const parts = [`${t.usage.prompt_tokens} prompt (${cached} cached) + ${t.usage.completion_tokens} completion tokens`];
  if (t.service) parts.push(usd(t.service.cost_micros));
  if (t.ttft != null) parts.push(`first token after ${t.ttft} ms`);
  return parts.join(" · ");
}

// The element of one assistant turn being streamed: reasoning (folded), text, tool calls and
// its figures.
export function turnView() {
  const reasoningText = h("div", { class: "reasoning-text" });
  const reasoning = h("details", { class: "reasoning", hidden: true }, h("summary", {}, "Reasoning"), reasoningText);
  const content = h("div", { class: "answer-text" });
  const calls = h("div", { class: "tool-calls" });
  const figures = h("p", { class: "muted turn-meta", role: "status" });
  const el = h("div", { class: "turn assistant" }, h("div", { class: "who" }, "Assistant"), reasoning, content, calls, figures);
  return { el, reasoning, reasoningText, content, calls, figures };
}

// The playground's own requests in the activity list: the billed row of `requestId` (it is
// settled a moment after the stream ends), or null when it does not show within 5 s.
async function billedRow(requestId) {
  for (let i = 0; i < 25; i++) {
    const page = await api("GET", "/api/v1/usage?key_id=playground&limit=10", undefined, { quiet: true }).catch(() => null);
    const row = page && page.usage.find((u) => u.request_id === requestId);
    if (row) return row;
    await new Promise((r) => setTimeout(r, 200));
  }
  return null;
}

// Send `body`, streaming into `view`. Resolves to the turn: the assistant message (null when
// stopped before anything came), usage, cost, time to first token, and how it ended.
export async function streamTurn(conv, body, view) {
  conv.controller = new AbortController();
  const started = performance.now();
  let requestId = null;
  try {
    const r = await fetch("/v1/chat/completions", {
      method: "POST", credentials: "same-origin", headers: { "content-type": "application/json" },
      body: JSON.stringify(body), signal: conv.controller.signal,
    });
    requestId = r.headers.get("x-request-id");
    if (!r.ok) {
      const v = await r.json().catch(() => ({}));
      throw new Error((v.error && v.error.message) || `HTTP ${r.status}`);
    }
    const out = await readStream(r, view, started);
    const message = { role: "assistant", content: out.content || (out.calls.length ? null : "") };
    if (out.calls.length) message.tool_calls = out.calls;
    return { message, usage: out.usage, service: out.service, ttft: out.ttft, finish: out.finish };
  } catch (e) {
    if (e.name !== "AbortError") throw e;
    // Stopped: the server cancels the generation and bills the tokens made so far.
    const row = requestId ? await billedRow(requestId) : null;
    const note = row
      ? `Stopped: billed ${usd(row.cost_micros)} for ${row.prompt_tokens} prompt + ${row.completion_tokens} completion tokens`
      : "Stopped.";
    const text = view.content.textContent;
    return { message: text ? { role: "assistant", content: text } : null, note, finish: "stopped", billed: row };
  } finally {
    conv.controller = null;
  }
}
