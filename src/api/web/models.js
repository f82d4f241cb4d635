// The model catalogue (search, sort, filter) and a page per model: facts, prices, cost per
// language, licence and example requests.
import { h, render, loadModels, licence, table, empty } from "./core.js";

// ISO 639-3 codes of the measured languages (data/languages) -> readable names.
const LANGUAGES = {
  amh: "Amharic", arb: "Arabic", ben: "Bengali", bul: "Bulgarian", ces: "Czech", cmn: "Chinese (Mandarin)",
  deu: "German", ell: "Greek", eng: "English", fin: "Finnish", fra: "French", heb: "Hebrew", hin: "Hindi",
  hun: "Hungarian", hye: "Armenian", ind: "Indonesian", ita: "Italian", jpn: "Japanese", kat: "Georgian",
  kor: "Korean", mar: "Marathi", nld: "Dutch", pes: "Persian", pol: "Polish", por: "Portuguese", rus: "Russian",
  spa: "Spanish", swh: "Swahili", tam: "Tamil", tha: "Thai", tur: "Turkish", ukr: "Ukrainian", urd: "Urdu",
  vie: "Vietnamese",
};
export const languageName = (code) => LANGUAGES[code] || code;

const yesNo = (v, why) => (v ? "yes" : h("span", { class: "warn", title: why || null }, why ? `no: ${why}` : "no"));
// A chat model's "servable here": while its weights are fetched or loaded, how far that got.
const servable = (m) => (m.preparing ? preparing(m.preparing) : yesNo(m.available, m.unavailable_reason));
export const preparing = (p) =>
  p.stage === "downloading" ? `downloading ${p.percent ?? 0}%` : "loading";
const modelLink = (m) => h("a", { href: `#/models/${encodeURIComponent(m.id)}` }, m.name || m.id);
const typeOf = (m) => (m.base ? "Base (continues text)" : "Chat");

// Sortable columns: header text -> sort key.
const SORTS = [
  ["Model", "name", (m) => (m.name || m.id).toLowerCase()],
  ["Maker", "maker", (m) => m.owned_by.toLowerCase()],
  ["Context", "context", (m) => m.context_length],
  ["Input", "input", (m) => m.pricing.input_micros_per_mtok],
  ["Output", "output", (m) => m.pricing.output_micros_per_mtok],
];

function chatRow(m) {
  return [
    [modelLink(m), h("div", {}, h("code", {}, m.id))],
    m.owned_by,
    typeOf(m),
    m.context_length.toLocaleString(),
    "$" + m.pricing.input_per_million_usd,
    "$" + m.pricing.output_per_million_usd,
    licence(m.license),
    yesNo(m.license.commercial_use),
    servable(m),
  ];
}

// The header row: the sortable columns are buttons, with aria-sort on the current one.
function sortHead(cols, sort, onSort) {
  return h("thead", {}, h("tr", {}, cols.map((c) => {
    const def = SORTS.find(([label]) => label === c);
    if (!def) return h("th", { scope: "col" }, c);
    const [, key] = def;
    const current = sort.key === key;
    return h("th", { scope: "col", "aria-sort": current ? (sort.dir > 0 ? "ascending" : "descending") : "none" },
      h("button", { type: "button", class: "sort", onclick: () => onSort(key) },
        c, h("span", { "aria-hidden": "true" }, current ? (sort.dir > 0 ? " ▲" : " ▼") : " ↕")));
  })));
}

function filterModels(list, q, servable, sort) {
  const words = q.toLowerCase().split(/\s+/).filter(Boolean);
  const shown = list.filter((m) => {
    if (servable && !m.available) return false;
    const hay = `${m.name || ""} ${m.id} ${m.owned_by}`.toLowerCase();
    return words.every((w) => hay.includes(w));
  });
  const def = SORTS.find(([, key]) => key === sort.key);
  if (def) {
    const val = def[2];
    shown.sort((a, b) => (val(a) < val(b) ? -sort.dir : val(a) > val(b) ? sort.dir : 0));
  }
  return shown;
}

function speechTable(speech) {
  return table(["Model", "Maker", "Does", "Price", "Commercial use", "Servable here"], speech.map((m) => [
    [modelLink(m), h("div", {}, h("code", {}, m.id))],
    m.owned_by,
    m.kind === "speech" ? "text to speech" : "speech to text",
    `$${m.pricing.per_unit_usd} per ${m.pricing.unit}`,
    yesNo(m.license.commercial_use),
    yesNo(m.available, m.unavailable_reason),
  ]), { empty: "No speech models in this catalogue." });
}

export async function viewModels(query) {
  const all = await loadModels();
  const chat = all.filter((m) => !m.kind), speech = all.filter((m) => m.kind);
  const sort = { key: query.get("sort") || "", dir: query.get("dir") === "desc" ? -1 : 1 };
  const search = h("input", { type: "search", name: "q", value: query.get("q") || "", autocomplete: "off" });
  const servable = h("input", { type: "checkbox", name: "servable", checked: query.get("servable") === "1" });
  const holder = h("div", { class: "catalogue" });
  const cols = ["Model", "Maker", "Type", "Context", "Input", "Output", "Licence", "Commercial use", "Servable here"];
  const count = h("p", { class: "muted", role: "status" });
  const draw = () => {
    const q = search.value.trim();
    const shown = filterModels(chat, q, servable.checked, sort);
    count.textContent = `${shown.length} of ${chat.length} models shown.`;
    const none = `No model matches “${q}”${servable.checked ? " among those servable here" : ""}.`;
    holder.replaceChildren(shown.length
      ? table(cols, shown.map(chatRow), { head: sortHead(cols, sort, onSort) })
      : empty(q ? none : "No model is servable on this server.", " ", h("a", { href: "#/models" }, "Show all models")));
    const p = new URLSearchParams();
    if (q) p.set("q", q);
    if (servable.checked) p.set("servable", "1");
    if (sort.key) { p.set("sort", sort.key); p.set("dir", sort.dir > 0 ? "asc" : "desc"); }
    history.replaceState(null, "", "#/models" + (p.toString() ? "?" + p : ""));
  };
  function onSort(key) {
    sort.dir = sort.key === key ? -sort.dir : 1;
    sort.key = key;
    draw();
    const btn = [...holder.querySelectorAll("th[aria-sort] button")].find((b) => b.closest("th").getAttribute("aria-sort") !== "none");
    if (btn) btn.focus();
  }
  search.addEventListener("input", draw);
  servable.addEventListener("change", draw);
  draw();
  render("Models and prices", h("h1", {}, "Models and prices"),
    h("p", { class: "muted" }, "Prices in USD per 1M tokens. Models whose licence forbids commercial use are listed but refused. Sort by clicking a column's name."),
    h("div", { class: "filters", role: "search" },
      h("label", {}, "Search models (name, id or maker)", search),
      h("label", { class: "check" }, servable, "Servable here")),
    count, holder,
    h("h2", {}, "Speech models"),
    h("p", { class: "muted" }, "Transcription is billed per second of audio (rounded up), speech per input character."),
    speechTable(speech));
}


// ---- a model's page ----

function facts(pairs) {
  return h("dl", { class: "facts" }, pairs.filter(Boolean).map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]));
}

function languageTable(m) {
  const entries = Object.entries(m.languages || {}).sort((a, b) => a[1] - b[1]);
  const input = Number(m.pricing.input_per_million_usd);
  return table(["Language", "Tokens vs English", "Input price for the same text"], entries.map(([code, x]) => [
    [languageName(code), " ", h("code", { class: "muted" }, code)], `×${Number(x).toFixed(2)}`,
    `$${Number((input * x).toPrecision(3))} / 1M`,
  ]), { plain: true, cls: "lang", empty: "Per-language token costs are not measured for this model." });
}

// Example requests for a chat model, or a speech model's endpoint.
function examples(m) {
  const base = location.origin + "/v1";
  const key = "sk-svc-...";
  const py = `from openai import OpenAI\n\nclient = OpenAI(base_url="${base}", api_key="${key}")\n`;
  const js = `import OpenAI from "openai";\n\nconst client = new OpenAI({ baseURL: "${base}", apiKey: "${key}" });\n`;
  if (m.kind === "transcription") {
    return {
      curl: `curl ${base}/audio/transcriptions \\\n  -H "Authorization: Bearer ${key}" \\\n  -F model=${m.id} -F file=@audio.wav`,
      Python: py + `with open("audio.wav", "rb") as f:\n    text = client.audio.transcriptions.create(model="${m.id}", file=f)\nprint(text.text)`,
      Node: `import fs from "node:fs";\n` + js + `const text = await client.audio.transcriptions.create({\n  model: "${m.id}",\n  file: fs.createReadStream("audio.wav"),\n});\nconsole.log(text.text);`,
    };
  }
  if (m.kind === "speech") {
    const voice = (m.voices && m.voices[0]) || "default";
    return {
      curl: `curl ${base}/audio/speech \\\n  -H "Authorization: Bearer ${key}" -H "Content-Type: application/json" \\\n  -d '{"model": "${m.id}", "voice": "${voice}", "input": "Hello!"}' -o hello.mp3`,
      Python: py + `audio = client.audio.speech.create(model="${m.id}", voice="${voice}", input="Hello!")\naudio.write_to_file("hello.mp3")`,
      Node: `import fs from "node:fs";\n` + js + `const audio = await client.audio.speech.create({ model: "${m.id}", voice: "${voice}", input: "Hello!" });\nfs.writeFileSync("hello.mp3", Buffer.from(await audio.arrayBuffer()));`,
    };
  }
  const say = m.base ? "The capital of France is" : "Say hello in French.";
  return {
    curl: `curl ${base}/chat/completions \\\n  -H "Authorization: Bearer ${key}" -H "Content-Type: application/json" \\\n  -d '{"model": "${m.id}", "max_tokens": 64,\n       "messages": [{"role": "user", "content": "${say}"}]}'`,
    Python: py + `reply = client.chat.completions.create(\n    model="${m.id}",\n    max_tokens=64,\n    messages=[{"role": "user", "content": "${say}"}],\n)\nprint(reply.choices[0].message.content)`,
    Node: js + `const reply = await client.chat.completions.create({\n  model: "${m.id}",\n  max_tokens: 64,\n  messages: [{ role: "user", content: "${say}" }],\n});\nconsole.log(reply.choices[0].message.content);`,
  };
}

// Tabs over the example requests (arrow keys move between them).
function exampleTabs(m) {
  const code = examples(m);
  const names = Object.keys(code);
  const tabs = [], panels = [];
  const select = (i, focus) => names.forEach((_, j) => {
    tabs[j].setAttribute("aria-selected", String(i === j));
    tabs[j].tabIndex = i === j ? 0 : -1;
    panels[j].hidden = i !== j;
    if (focus && i === j) tabs[j].focus();
  });
  names.forEach((name, i) => {
    tabs.push(h("button", {
      type: "button", role: "tab", id: `ex-tab-${i}`, "aria-controls": `ex-panel-${i}`, class: "tab",
      onclick: () => select(i),
      onkeydown: (ev) => {
        const step = { ArrowRight: 1, ArrowLeft: -1 }[ev.key];
        if (step) select((i + step + names.length) % names.length, true);
      },
    }, name));
    panels.push(h("div", { role: "tabpanel", id: `ex-panel-${i}`, "aria-labelledby": `ex-tab-${i}`, tabindex: "0" },
      h("pre", { class: "example" }, h("code", {}, code[name]))));
  });
  select(0);
  return h("div", { class: "tabs" }, h("div", { role: "tablist", "aria-label": "Example request" }, tabs), panels);
}

function notFound(id) {
  render("Unknown model", h("h1", {}, `No model named “${id}”`),
    h("p", {}, "This server's catalogue has no model with that id. Model ids are lower case, like ", h("code", {}, "qwen3-4b"), "."),
    h("p", {}, h("a", { href: "#/models" }, "Back to the models and prices")));
}

function chatFacts(m) {
  const p = m.pricing;
  return [
    facts([
      ["Model id", h("code", {}, m.id)], ["Maker", m.owned_by], ["Family", m.family], ["Parameters", m.parameters],
      ["Type", m.base ? "Base model: it continues text and is not trained to follow chat turns" : "Instruct (chat) model"],
      ["Context length", `${m.context_length.toLocaleString()} tokens`], ["Quantization", m.quantization],
      ["Servable here", servable(m)],
    ]),
    h("h2", {}, "Prices"),
    facts([
      ["Input", `$${p.input_per_million_usd} per 1M tokens`],
      ["Cached input", `$${p.cached_input_per_million_usd} per 1M tokens (prompt tokens served from the prefix cache)`],
      ["Output", `$${p.output_per_million_usd} per 1M tokens`],
    ]),
    h("h2", {}, "Cost per language"),
    h("p", { class: "muted" }, "The same text takes more tokens in some languages than in English, so it costs more: ×2 means twice the tokens of the English text, ",
      "and the last column is the input price of a text whose English version is 1M tokens."),
    languageTable(m),
  ];
}

function speechFacts(m) {
  return facts([
    ["Model id", h("code", {}, m.id)], ["Maker", m.owned_by], ["Parameters", m.parameters],
    ["Does", m.kind === "speech" ? "text to speech" : "speech to text"],
    ["Price", `$${m.pricing.per_unit_usd} per ${m.pricing.unit}`],
    m.voices && m.voices.length ? ["Voices", m.voices.join(", ")] : null,
    ["Servable here", yesNo(m.available, m.unavailable_reason)],
  ]);
}

export async function viewModel(id) {
  const m = (await loadModels()).find((x) => x.id === id);
  if (!m) return notFound(id);
  const l = m.license;
  render(m.name || m.id, h("p", { class: "crumbs" }, h("a", { href: "#/models" }, "Models and prices")),
    h("h1", {}, m.name || m.id),
    m.kind ? speechFacts(m) : chatFacts(m),
    h("h2", {}, "Licence"),
    facts([
      ["Licence", h("a", { href: l.url, rel: "noopener" }, l.name)],
      ["Commercial use", l.commercial_use ? "allowed" : h("span", { class: "warn" }, "not allowed: this server refuses requests to it")],
      l.attribution ? ["Notice", h("span", { class: "attribution" }, l.attribution)] : null,
      l.use_policy ? ["Use policy", h("a", { href: l.use_policy, rel: "noopener" }, "Use policy (applies to you and your users)")] : null,
    ]),
    h("h2", {}, "Example request"),
    h("p", { class: "muted" }, "Replace ", h("code", {}, "sk-svc-..."), " with one of your ", h("a", { href: "#/keys" }, "API keys"), "."),
    exampleTabs(m));
}
