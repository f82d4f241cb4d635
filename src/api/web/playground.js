// The playground: a multi-turn chat streamed token by token and paid from the balance through
// the session (no key), with edit, retry, clear and stop; each answer's tokens, cost and time
// to first token; tool calls answered by hand; structured output; images; speech and
// embeddings panels; the request as code; and a second model side by side.
import { h, render, feedback, loadModels, licence, refreshMe } from "./core.js";
import { languageName, preparing } from "./models.js";
import { conversation, requestBody, streamTurn, turnFigures, turnView } from "./chat.js";
import { codeView } from "./code.js";
import { toolsPanel, schemaPanel, imagePanel, transcribePanel, speechPanel, embeddingsPanel } from "./panels.js";

const WAITING = "Waiting for the model (the first request to a model loads it; this can take a while)…";

// `none`: the label of an empty first choice (for an optional model).
function modelSelect(list, attrs, none) {
  const label = (m) => `${m.id} — $${m.pricing.input_per_million_usd} in / $${m.pricing.output_per_million_usd} out per 1M`;
  // Servable chat models first; base models (they continue text, they do not answer turns) and
  // models this server cannot serve are listed, marked and not selectable.
  const ready = list.filter((m) => m.available && !m.base);
  const base = list.filter((m) => m.base), absent = list.filter((m) => !m.available && !m.base);
  return h("select", attrs,
    none ? h("option", { value: "" }, none) : null,
    ready.map((m) => h("option", { value: m.id }, m.preparing ? `${label(m)} (${preparing(m.preparing)})` : label(m))),
    base.length ? h("optgroup", { label: "Base models: they continue text and are not trained for chat; use the API" },
      base.map((m) => h("option", { value: m.id, disabled: true }, `${label(m)} (base model)`))) : null,
    absent.length ? h("optgroup", { label: "Not servable on this server" },
      absent.map((m) => h("option", { value: m.id, disabled: true }, `${label(m)} (${m.unavailable_reason})`))) : null);
}

// A message's text: its string, or its text parts.
function textOf(m) {
  if (typeof m.content === "string") return m.content;
  if (!Array.isArray(m.content)) return "";
  return m.content.filter((p) => p.type === "text").map((p) => p.text).join("\n");
}

// The `data:` URLs of a message's images.
function imagesOf(m) {
  return Array.isArray(m.content) ? m.content.filter((p) => p.type === "image_url").map((p) => p.image_url.url) : [];
}

// A message's text for the log, with how many images it carries.
function messageText(m) {
  const images = imagesOf(m).length;
  return images ? `${textOf(m)} [${images} image${images > 1 ? "s" : ""}]` : textOf(m);
}

// The images a user turn carries, shown small (the CSP allows `data:` images).
function thumbnails(m) {
  const urls = imagesOf(m);
  return urls.length ? h("div", { class: "thumbs" },
    urls.map((src, i) => h("img", { src, alt: `Attached image ${i + 1}` }))) : null;
}

// The user turn for `text` with image `urls`: the images come before the question, as in the
// chat examples of the image-reading models (Gemma 3, SmolVLM, Qwen2.5-VL).
function userMessage(text, urls) {
  const content = urls.length
    ? [...urls.map((url) => ({ type: "image_url", image_url: { url } })), { type: "text", text }]
    : text;
  return { role: "user", content };
}

// One side of the playground (the model, and the compared model): its conversation and log.
function side(id, title) {
  const conv = conversation();
  const log = h("div", { class: "log", id, "aria-live": "polite", "aria-label": `${title} conversation` });
  return { conv, log, title, column: h("section", { class: "side" }, h("h2", {}, title), log) };
}

export async function viewPlayground() {
  // Chat models only: speech and embedding models (the entries with a `kind`) have panels.
  const all = (await loadModels()).filter((m) => m.license.commercial_use);
  const list = all.filter((m) => !m.kind);
  const of = (kind) => all.filter((m) => m.kind === kind && m.available);
  const select = modelSelect(list, { name: "model", id: "pg-model" });
  const compare = modelSelect(list, { name: "compare", id: "pg-compare-model" }, "No comparison");
  const attribution = h("div", { class: "muted", id: "pg-licence" });
  const langs = h("p", { class: "muted", id: "pg-langs" });
  const tools = toolsPanel(), schema = schemaPanel(), images = imagePanel();
  const user = h("textarea", { name: "user", id: "pg-user", rows: "3" });
  const system = h("textarea", { name: "system", rows: "2" });
  const maxTokens = h("input", { name: "max_tokens", type: "number", min: "1", max: "4096", value: "128" });
  const temperature = h("input", { name: "temperature", type: "number", min: "0", max: "2", step: "0.1", value: "0.7" });
  // A thinking model's switch (`reasoning_effort`): "none" is accepted by every model, so a
  // compared model that does not think takes it too.
  const thinking = h("select", { name: "reasoning_effort", id: "pg-thinking" },
    h("option", { value: "" }, "On (the model's default)"), h("option", { value: "none" }, "Off"));
  const thinkingLabel = h("label", {}, "Thinking", thinking);
  const main = side("pg-log", "Conversation"), other = side("pg-log-compare", "Comparison");
  const sides = () => (compare.value ? [main, other] : [main]);
  const model = (s) => (s === main ? select.value : compare.value);
  const current = () => list.find((x) => x.id === select.value);
  const thinks = (id) => ((list.find((x) => x.id === id) || {}).supported_parameters || []).includes("reasoning_effort");

  const showModel = () => {
    const m = current();
    langs.textContent = m && m.languages
      ? "Token cost vs English: " + Object.entries(m.languages).sort((a, b) => a[1] - b[1]).slice(0, 8)
        .map(([k, v]) => `${languageName(k)} ×${Number(v).toFixed(2)}`).join(", ") + "…"
      : "Per-language token costs not measured for this model.";
    attribution.replaceChildren(...(m ? licence(m.license) : []).flat().filter(Boolean),
      m ? h("div", {}, h("a", { href: `#/models/${encodeURIComponent(m.id)}` }, "About this model")) : "");
    const params = (m && m.supported_parameters) || [];
    tools.el.hidden = !params.includes("tools");
    schema.el.hidden = !params.includes("response_format");
    images.el.hidden = !(m && m.architecture.input_modalities.includes("image"));
    thinkingLabel.hidden = !(thinks(select.value) || thinks(compare.value));
  };
  select.addEventListener("change", showModel);
  compare.addEventListener("change", showModel);

  const opts = () => ({
    max_tokens: Number(maxTokens.value) || 128,
    temperature: Number(temperature.value),
    tools: tools.el.hidden ? null : tools.read(),
    tool_choice: tools.choice(),
    schema: schema.el.hidden ? null : schema.read(),
    reasoning_effort: thinkingLabel.hidden ? null : thinking.value || null,
  });
  const history = (s) => (system.value ? [{ role: "system", content: system.value }] : []).concat(s.conv.messages);
  const codeBox = h("div", { id: "pg-code-box", hidden: true });
  const stop = h("button", { type: "button", id: "pg-stop", disabled: true }, "Stop");
  const send = h("button", { type: "submit" }, "Send");

  // Re-draws a side's log: user turns can be edited, tool calls answered.
  const draw = (s) => {
    s.log.replaceChildren(...s.conv.messages.map((m, i) => {
      if (m.role === "user") {
        const edit = h("button", { type: "button", class: "link" }, "Edit");
        edit.addEventListener("click", () => editFrom(i));
        return h("div", { class: "turn user" }, h("div", { class: "who" }, "You"), h("div", {}, messageText(m)),
          thumbnails(m), edit);
      }
      if (m.role === "tool") return h("div", { class: "turn tool" }, h("div", { class: "who" }, "Tool result"), h("pre", {}, m.content));
      const t = s.conv.turns[i] || {};
      return h("div", { class: "turn assistant" }, h("div", { class: "who" }, "Assistant"),
        t.reasoning ? h("details", { class: "reasoning" }, h("summary", {}, "Reasoning"), h("div", { class: "reasoning-text" }, t.reasoning)) : null,
        h("div", { class: "answer-text" }, m.content || ""),
        (m.tool_calls || []).map((c) => h("pre", { class: "tool-call" }, `${c.function.name}(${c.function.arguments})`)),
        h("p", { class: "muted turn-meta" }, turnFigures(t)));
    }));
    const last = s.conv.messages[s.conv.messages.length - 1];
    if (last && last.tool_calls) s.log.append(toolResults(s, last.tool_calls));
  };

  // One input per pending tool call; sending them continues the turn.
  const toolResults = (s, calls) => {
    const inputs = calls.map((c) => h("textarea", { rows: "1", "data-call": c.id }));
    const go = h("button", { type: "submit" }, "Send tool results");
    const f = h("form", { class: "tool-results", onsubmit: (ev) => {
      ev.preventDefault();
      calls.forEach((c, i) => s.conv.messages.push({ role: "tool", tool_call_id: c.id, content: inputs[i].value }));
      run([s]);
    } }, calls.map((c, i) => h("label", {}, `Result of ${c.function.name}(${c.function.arguments})`, inputs[i])), go);
    return f;
  };

  // Streams the next assistant turn of each side in `which`.
  const run = async (which) => {
    let body;
    try {
      body = which.map((s) => requestBody(model(s), history(s), opts()));
    } catch (e) {
      send.disabled = false;
      feedback(send, e.message, true);
      return;
    }
    feedback(send, null);
    codeBox.replaceChildren(codeView(body[0]));
    send.disabled = true;
    stop.disabled = false;
    await Promise.all(which.map(async (s, k) => {
      draw(s);
      const view = turnView();
      view.figures.textContent = WAITING;
      s.log.append(view.el);
      try {
        const t = await streamTurn(s.conv, body[k], view);
        t.reasoning = view.reasoningText.textContent;
        if (t.message) {
          s.conv.turns[s.conv.messages.length] = t;
          s.conv.messages.push(t.message);
          draw(s);
        } else {
          view.figures.textContent = t.note;
        }
      } catch (e) {
        view.figures.textContent = "";
        feedback(view.el, e.message, true);
      }
    }));
    send.disabled = false;
    stop.disabled = true;
    refreshMe();
  };

  stop.addEventListener("click", () => sides().forEach((s) => s.conv.controller && s.conv.controller.abort()));
  const editFrom = (i) => {
    const turn = main.conv.messages[i], urls = imagesOf(turn);
    user.value = textOf(turn);
    if (urls.length && images.el.hidden) feedback(send, "This model does not read images: the turn's images are left out.", true);
    else if (urls.length) images.restore(urls);
    for (const s of [main, other]) {
      s.conv.messages.length = Math.min(i, s.conv.messages.length);
      draw(s);
    }
    user.focus();
  };
  const clear = h("button", { type: "button", id: "pg-clear" }, "Clear");
  clear.addEventListener("click", () => [main, other].forEach((s) => { s.conv.messages = []; s.conv.turns = []; draw(s); }));
  const retry = h("button", { type: "button", id: "pg-retry" }, "Retry");
  retry.addEventListener("click", () => {
    const which = sides().filter((s) => s.conv.messages.length);
    for (const s of which) {
      while (s.conv.messages.length && s.conv.messages[s.conv.messages.length - 1].role === "assistant") s.conv.messages.pop();
    }
    if (which.length) run(which);
  });
  const showCode = h("button", { type: "button", id: "pg-show-code", "aria-expanded": "false" }, "Show code");
  // The request Send would make: the history, the message being written and its images.
  showCode.addEventListener("click", async () => {
    codeBox.hidden = !codeBox.hidden;
    showCode.setAttribute("aria-expanded", String(!codeBox.hidden));
    if (!codeBox.hidden) {
      // Emptied first: the images are read asynchronously, and the last request's code must
      // not show meanwhile as if it were this one's.
      codeBox.replaceChildren();
      try {
        const urls = images.el.hidden ? [] : await images.peek();
        codeBox.replaceChildren(codeView(requestBody(select.value, history(main).concat(
          user.value ? [userMessage(user.value, urls)] : []), opts())));
      } catch (e) {
        feedback(showCode, e.message, true);
      }
    }
  });
  compare.addEventListener("change", () => { other.column.hidden = !compare.value; });
  other.column.hidden = true;

  const f = h("form", { class: "composer", onsubmit: async (ev) => {
    ev.preventDefault();
    if (!user.value.trim()) return feedback(send, "Write a message first.", true);
    // Disabled while the images are read, so a second Enter cannot send the turn twice.
    send.disabled = true;
    let urls;
    try {
      urls = images.el.hidden ? [] : await images.take();
    } catch (e) {
      send.disabled = false;
      return feedback(send, e.message, true);
    }
    for (const s of sides()) s.conv.messages.push(userMessage(user.value, urls));
    user.value = "";
    run(sides());
  } },
  h("label", {}, "Your message", user), h("div", { class: "buttons" }, send, stop, retry, clear, showCode));
  showModel();
  render("Playground", h("h1", {}, "Playground"),
    h("p", { class: "muted" }, "Replies are paid from your balance, with their own rate limit; they show in your usage as “Playground”."),
    list.length ? [
      h("div", { class: "settings" },
        h("label", {}, "Model", select), langs, attribution,
        h("label", {}, "Compare with", compare),
        h("label", {}, "System message (optional)", system),
        h("label", {}, "Max tokens", maxTokens),
        h("label", {}, "Temperature (0 = always the most likely token)", temperature), thinkingLabel,
        tools.el, schema.el, images.el),
      h("div", { class: "sides" }, main.column, other.column),
      f, codeBox,
    ] : h("p", { class: "empty" }, "No chat model is available."),
    of("transcription").length ? transcribePanel(of("transcription"), (t) => { user.value = t; user.focus(); }) : null,
    of("speech").length ? speechPanel(of("speech")) : null,
    of("embedding").length ? embeddingsPanel(of("embedding")) : null);
}
