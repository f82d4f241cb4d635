// The playground: a streamed chat reply paid from the balance through the session (no key).
import { h, render, field, feedback, loadModels, licence, refreshMe, usd } from "./core.js";
import { languageName, preparing } from "./models.js";

const WAITING = "Waiting for the model (the first request to a model loads it; this can take a while)…";

function modelSelect(list) {
  const label = (m) => `${m.id} — $${m.pricing.input_per_million_usd} in / $${m.pricing.output_per_million_usd} out per 1M`;
  // Servable chat models first; base models (they continue text, they do not answer turns) and
  // models this server cannot serve are listed, marked and not selectable.
  const ready = list.filter((m) => m.available && !m.base);
  const base = list.filter((m) => m.base), absent = list.filter((m) => !m.available && !m.base);
  return h("select", { name: "model", id: "pg-model" },
    ready.map((m) => h("option", { value: m.id }, m.preparing ? `${label(m)} (${preparing(m.preparing)})` : label(m))),
    base.length ? h("optgroup", { label: "Base models: they continue text and are not trained for chat; use the API" },
      base.map((m) => h("option", { value: m.id, disabled: true }, `${label(m)} (base model)`))) : null,
    absent.length ? h("optgroup", { label: "Not servable on this server" },
      absent.map((m) => h("option", { value: m.id, disabled: true }, `${label(m)} (${m.unavailable_reason})`))) : null);
}

// Reads the server-sent events of a streamed reply into `answer`; returns the last usage line.
async function stream(r, answer, meta) {
  const reader = r.body.getReader();
  const dec = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += dec.decode(value, { stream: true });
    let i;
    while ((i = buf.indexOf("\n\n")) >= 0) {
      const event = buf.slice(0, i);
      buf = buf.slice(i + 2);
      for (const line of event.split("\n")) {
        if (!line.startsWith("data: ") || line === "data: [DONE]") continue;
        const c = JSON.parse(line.slice(6));
        if (c.error) throw new Error(c.error.message);
        const delta = c.choices && c.choices[0] && c.choices[0].delta;
        if (delta && delta.content) {
          if (!answer.textContent) meta.textContent = "Answering…";
          answer.textContent += delta.content;
        }
        if (c.usage) {
          const cost = c.service ? ` · ${usd(c.service.cost_micros)}` : "";
          meta.textContent = `${c.usage.prompt_tokens} prompt + ${c.usage.completion_tokens} completion tokens${cost}`;
        }
      }
    }
  }
}

async function send(f, answer, meta, button) {
  const messages = [];
  if (f.get("system")) messages.push({ role: "system", content: f.get("system") });
  messages.push({ role: "user", content: f.get("user") });
  answer.textContent = "";
  meta.textContent = WAITING;
  feedback(button, null);
  button.disabled = true;
  try {
    const r = await fetch("/v1/chat/completions", {
      method: "POST", credentials: "same-origin", headers: { "content-type": "application/json" },
      body: JSON.stringify({
        model: f.get("model"), messages, stream: true, max_tokens: Number(f.get("max_tokens")) || 128,
        temperature: Number(f.get("temperature")), stream_options: { include_usage: true },
      }),
    });
    if (!r.ok) {
      const v = await r.json().catch(() => ({}));
      throw new Error((v.error && v.error.message) || `HTTP ${r.status}`);
    }
    await stream(r, answer, meta);
    refreshMe();
  } catch (e) {
    meta.textContent = "";
    feedback(button, e.message, true);
  } finally {
    button.disabled = false;
  }
}

export async function viewPlayground() {
  // Chat models only: speech models (the entries with a `kind`) have their own endpoints.
  const list = (await loadModels()).filter((m) => !m.kind && m.license.commercial_use);
  const select = modelSelect(list);
  const attribution = h("div", { class: "muted", id: "pg-licence" });
  const langs = h("p", { class: "muted", id: "pg-langs" });
  const showModel = () => {
    const m = list.find((x) => x.id === select.value);
    langs.textContent = m && m.languages
      ? "Token cost vs English: " + Object.entries(m.languages).sort((a, b) => a[1] - b[1]).slice(0, 8)
        .map(([k, v]) => `${languageName(k)} ×${Number(v).toFixed(2)}`).join(", ") + "…"
      : "Per-language token costs not measured for this model.";
    attribution.replaceChildren(...(m ? licence(m.license) : []).flat().filter(Boolean),
      m ? h("div", {}, h("a", { href: `#/models/${encodeURIComponent(m.id)}` }, "About this model")) : "");
  };
  select.addEventListener("change", showModel);
  showModel();
  const answer = h("div", { class: "answer", id: "pg-answer", "aria-live": "polite" });
  const meta = h("p", { class: "muted", id: "pg-meta", role: "status" });
  const button = h("button", { type: "submit" }, "Send");
  const f = h("form", { onsubmit: (ev) => { ev.preventDefault(); send(new FormData(f), answer, meta, button); } },
    h("label", {}, "Model", select), langs, attribution,
    h("label", {}, "System message (optional)", h("textarea", { name: "system", rows: "2" })),
    h("label", {}, "Your message", h("textarea", { name: "user", rows: "4", required: true })),
    field("Max tokens", { name: "max_tokens", type: "number", min: "1", max: "4096", value: "128" }),
    field("Temperature (0 = always the most likely token)", { name: "temperature", type: "number", min: "0", max: "2", step: "0.1", value: "0.7" }),
    button);
  render("Playground", h("h1", {}, "Playground"),
    h("p", { class: "muted" }, "Replies are paid from your balance, with their own rate limit; they show in your usage as “Playground”."),
    list.length ? f : h("p", { class: "empty" }, "No chat model is available."),
    h("h2", {}, "Answer"), answer, meta);
}
