// tollgate dashboard: a small single-page app over /api/v1 (session cookie) and /v1.
// No framework and no build step; the DOM is built with `h()` (never innerHTML), so text from
// the server is never parsed as HTML.
"use strict";

const $ = (sel) => document.querySelector(sel);
let me = null; // the signed-in account, or null
let models = null; // cached /v1/models
let providers = null; // sign-in providers from /api/v1/auth/providers

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (v === true) el.setAttribute(k, "");
    else if (v !== false && v != null) el.setAttribute(k, v);
  }
  for (const c of children.flat()) {
    if (c != null && c !== false) el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

function status(msg, isError) {
  const s = $("#status");
  s.textContent = msg || "";
  s.className = isError ? "error" : "";
}

// Calls the dashboard API; returns `data` or throws with the envelope's message.
async function api(method, path, body) {
  const opts = { method, credentials: "same-origin", headers: {} };
  if (body !== undefined) {
    opts.headers["content-type"] = "application/json";
    opts.body = JSON.stringify(body);
  }
  const r = await fetch(path, opts);
  const v = await r.json().catch(() => ({ ok: false, error: { message: `HTTP ${r.status}` } }));
  if (!v.ok) {
    const e = new Error(v.error && v.error.message ? v.error.message : `HTTP ${r.status}`);
    e.code = v.error && v.error.code;
    e.status = r.status;
    throw e;
  }
  return v.data;
}

const usd = (micros) => (micros < 0 ? "-$" : "$") + (Math.abs(micros) / 1e6).toFixed(micros % 10000 === 0 ? 2 : 6);
const when = (secs) => (secs ? new Date(secs * 1000).toLocaleString() : "—");

function field(label, attrs) {
  return h("label", {}, label, h("input", attrs));
}

function render(...nodes) {
  const main = $("#main");
  main.replaceChildren(...nodes);
  main.focus();
}

async function refreshMe() {
  try {
    me = await api("GET", "/api/v1/account");
  } catch (e) {
    me = null;
  }
  document.querySelectorAll("[data-auth]").forEach((el) => (el.hidden = !me));
  document.querySelectorAll("[data-anon]").forEach((el) => (el.hidden = !!me));
  document.querySelectorAll("[data-admin]").forEach((el) => (el.hidden = !(me && me.admin)));
}

async function loadModels() {
  if (!models) models = (await (await fetch("/v1/models")).json()).data;
  return models;
}

// ---- views ----

// A licence cell: its name (linked), the notice it requires shown beside the model, and the
// use policy it requires be passed on to users.
function licence(l) {
  return [
    h("a", { href: l.url, rel: "noopener" }, l.name),
    l.attribution ? h("div", { class: "muted attribution" }, l.attribution) : [],
    l.use_policy ? h("div", {}, h("a", { href: l.use_policy, rel: "noopener" }, "Use policy")) : [],
  ];
}

async function viewModels() {
  const all = await loadModels();
  const list = all.filter((m) => !m.kind), speech = all.filter((m) => m.kind);
  const speechRows = speech.map((m) =>
    h("tr", {},
      h("td", {}, h("code", {}, m.id)),
      h("td", {}, m.owned_by),
      h("td", {}, m.kind === "speech" ? "text to speech" : "speech to text"),
      h("td", {}, `$${m.pricing.per_unit_usd} per ${m.pricing.unit}`),
      h("td", {}, m.license.commercial_use ? "yes" : h("span", { class: "warn" }, "no")),
      h("td", {}, m.available ? "yes" : h("span", { class: "warn", title: m.unavailable_reason || "" }, "no"))));
  const rows = list.map((m) =>
    h("tr", {},
      h("td", {}, h("code", {}, m.id), m.base ? h("span", { class: "muted" }, " (base model)") : []),
      h("td", {}, m.owned_by),
      h("td", {}, m.context_length.toLocaleString()),
      h("td", {}, "$" + m.pricing.input_per_million_usd),
      h("td", {}, "$" + m.pricing.output_per_million_usd),
      h("td", {}, licence(m.license)),
      h("td", {}, m.license.commercial_use ? "yes" : h("span", { class: "warn" }, "no")),
      h("td", {}, m.available ? "yes" : h("span", { class: "warn", title: m.unavailable_reason || "" }, "no"))));
  render(
    h("h1", {}, "Models and prices"),
    h("p", { class: "muted" }, "Prices in USD per 1M tokens. Models whose licence forbids commercial use are listed but refused."),
    h("div", { class: "table-wrap" },
      h("table", {},
        h("thead", {}, h("tr", {}, ["Model", "Maker", "Context", "Input", "Output", "Licence", "Commercial use", "Servable here"].map((t) => h("th", { scope: "col" }, t)))),
        h("tbody", {}, rows))),
    h("h2", {}, "Speech models"),
    h("p", { class: "muted" }, "Transcription is billed per second of audio (rounded up), speech per input character."),
    h("div", { class: "table-wrap" },
      h("table", {},
        h("thead", {}, h("tr", {}, ["Model", "Maker", "Does", "Price", "Commercial use", "Servable here"].map((t) => h("th", { scope: "col" }, t)))),
        h("tbody", {}, speechRows))));
}

function viewSignup() {
  const form = h("form", {
    onsubmit: async (ev) => {
      ev.preventDefault();
      const f = new FormData(form);
      try {
        await api("POST", "/api/v1/auth/signup", { email: f.get("email"), password: f.get("password") });
        render(h("h1", {}, "Check your e-mail"),
          h("p", {}, "We sent a link to confirm your address. On a self-hosted server without e-mail, the link is in the server log."));
        status("");
      } catch (e) { status(e.message, true); }
    },
  },
    field("E-mail", { name: "email", type: "email", autocomplete: "email", required: true }),
    field("Password (at least 8 characters)", { name: "password", type: "password", autocomplete: "new-password", minlength: "8", required: true }),
    h("button", { type: "submit" }, "Create account"));
  render(h("h1", {}, "Sign up"), form);
}

function viewSignin() {
  const form = h("form", {
    onsubmit: async (ev) => {
      ev.preventDefault();
      const f = new FormData(form);
      try {
        await api("POST", "/api/v1/auth/signin", { email: f.get("email"), password: f.get("password") });
        await refreshMe();
        status("Signed in.");
        location.hash = "#/keys";
      } catch (e) { status(e.message, true); }
    },
  },
    field("E-mail", { name: "email", type: "email", autocomplete: "email", required: true }),
    field("Password", { name: "password", type: "password", autocomplete: "current-password", required: true }),
    h("button", { type: "submit" }, "Sign in"));
  const reset = h("form", {
    onsubmit: async (ev) => {
      ev.preventDefault();
      try {
        await api("POST", "/api/v1/auth/password-reset", { email: new FormData(reset).get("email") });
        status("If the address has an account, a reset link is on its way.");
      } catch (e) { status(e.message, true); }
    },
  }, field("E-mail", { name: "email", type: "email", autocomplete: "email", required: true }),
  h("button", { type: "submit", class: "secondary" }, "Send a reset link"));
  const sso = providers && providers.oidc
    ? h("p", {}, h("a", { class: "button", href: providers.oidc.start }, `Sign in with ${providers.oidc.label}`))
    : "";
  render(h("h1", {}, "Sign in"), sso, form, h("h2", {}, "Forgot your password?"), reset);
}

// After Stripe Checkout returns: poll the top-up until its webhook has credited it (2 s apart,
// for up to 2 minutes), then say so and show the balance.
async function awaitTopup(checkoutId) {
  status("Payment received; waiting for the provider to confirm it…");
  for (let i = 0; i < 60; i++) {
    try {
      const t = await api("GET", `/api/v1/topups/${encodeURIComponent(checkoutId)}`);
      if (t.state === "completed") {
        if (location.hash === "#/balance") await route();
        status(`Top-up credited: ${usd(t.usd_micros)}.`);
        return;
      }
    } catch (e) {
      if (e.status === 401 || e.status === 404) { status(e.message, true); return; }
    }
    await new Promise((r) => setTimeout(r, 2000));
  }
  status("The provider has not confirmed the payment yet; the balance is credited as soon as it does.");
}

function viewReset(token) {
  const form = h("form", {
    onsubmit: async (ev) => {
      ev.preventDefault();
      try {
        await api("POST", "/api/v1/auth/password-reset/confirm", { token, password: new FormData(form).get("password") });
        history.replaceState(null, "", "/#/signin");
        status("Password changed; sign in with the new one.");
        route();
      } catch (e) { status(e.message, true); }
    },
  }, field("New password (at least 8 characters)", { name: "password", type: "password", autocomplete: "new-password", minlength: "8", required: true }),
  h("button", { type: "submit" }, "Set password"));
  render(h("h1", {}, "Choose a new password"), form);
}

async function viewKeys(created) {
  const { keys } = await api("GET", "/api/v1/keys");
  const form = h("form", {
    onsubmit: async (ev) => {
      ev.preventDefault();
      try {
        const d = await api("POST", "/api/v1/keys", { name: new FormData(form).get("name") });
        status("Key created.");
        viewKeys(d);
      } catch (e) { status(e.message, true); }
    },
  }, field("Name", { name: "name", maxlength: "100", required: true, placeholder: "laptop" }),
  h("button", { type: "submit" }, "Create key"));
  const fresh = created && h("div", { class: "newkey", role: "alert" },
    h("p", { class: "warn" }, "Copy this key now. It is stored only as a hash and cannot be shown again."),
    h("p", {}, h("code", { id: "new-key" }, created.key)),
    h("button", {
      type: "button",
      onclick: async () => {
        try { await navigator.clipboard.writeText(created.key); status("Copied."); } catch (e) { status("Copy failed: select the key and copy it.", true); }
      },
    }, "Copy"));
  const rows = keys.map((k) => h("tr", {},
    h("td", {}, k.name), h("td", {}, h("code", {}, k.prefix + "…")), h("td", {}, when(k.created_at)),
    h("td", {}, when(k.last_used_at)), h("td", {}, k.state),
    h("td", {}, k.state === "active" ? h("button", {
      type: "button", class: "secondary", "aria-label": `Revoke key ${k.name}`,
      onclick: async () => {
        if (!confirm(`Revoke "${k.name}"? Requests with it will fail at once.`)) return;
        try { await api("DELETE", `/api/v1/keys/${k.id}`); status("Key revoked."); viewKeys(); } catch (e) { status(e.message, true); }
      },
    }, "Revoke") : "")));
  render(h("h1", {}, "API keys"), fresh || "", form,
    h("p", { class: "muted" }, "Use a key with any OpenAI SDK: base URL ", h("code", {}, location.origin + "/v1"), "."),
    h("div", { class: "table-wrap" }, h("table", {},
      h("thead", {}, h("tr", {}, ["Name", "Key", "Created", "Last used", "State", ""].map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, rows))));
}

// Spend per day (settled charges) over the last 14 days, as an SVG bar chart.
function spendChart(entries) {
  const days = [];
  const now = new Date();
  for (let i = 13; i >= 0; i--) {
    const d = new Date(now.getFullYear(), now.getMonth(), now.getDate() - i);
    days.push({ key: d.toDateString(), label: `${d.getMonth() + 1}/${d.getDate()}`, micros: 0 });
  }
  for (const e of entries) {
    if (e.kind !== "settle") continue;
    const day = days.find((d) => d.key === new Date(e.created_at * 1000).toDateString());
    if (day) day.micros += -e.amount_micros;
  }
  const max = Math.max(1, ...days.map((d) => d.micros));
  const total = days.reduce((a, d) => a + d.micros, 0);
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", "0 0 420 140");
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", "Spend per day, last 14 days: " + days.map((d) => `${d.label} ${usd(d.micros)}`).join(", "));
  days.forEach((d, i) => {
    const hgt = Math.round((d.micros / max) * 100);
    const bar = document.createElementNS(ns, "rect");
    Object.entries({ x: 10 + i * 29, y: 110 - hgt, width: 22, height: hgt, fill: "#0b5cad" }).forEach(([k, v]) => bar.setAttribute(k, v));
    const label = document.createElementNS(ns, "text");
    Object.entries({ x: 21 + i * 29, y: 128, "font-size": 9, "text-anchor": "middle" }).forEach(([k, v]) => label.setAttribute(k, v));
    label.textContent = d.label;
    svg.append(bar, label);
  });
  return h("figure", {}, svg, h("figcaption", { class: "muted" }, `Spent in the last 14 days: ${usd(total)} (tallest bar: ${usd(max)})`));
}

async function viewBalance() {
  await refreshMe();
  const [{ usage }, { entries }] = await Promise.all([
    api("GET", "/api/v1/usage?limit=100"), api("GET", "/api/v1/entries?limit=500")]);
  const redeem = h("form", {
    onsubmit: async (ev) => {
      ev.preventDefault();
      try {
        const d = await api("POST", "/api/v1/redeem", { code: new FormData(redeem).get("code") });
        status(`Redeemed ${usd(d.credited_micros)}.`);
        viewBalance();
      } catch (e) { status(e.message, true); }
    },
  }, field("Redeem a code", { name: "code", required: true, autocomplete: "off" }),
  h("button", { type: "submit" }, "Redeem"));
  const topup = h("form", {
    onsubmit: async (ev) => {
      ev.preventDefault();
      const f = new FormData(topup);
      try {
        const d = await api("POST", "/api/v1/topups", { amount: f.get("amount"), currency: f.get("currency") });
        location.href = d.checkout_url;
      } catch (e) { status(e.message, true); }
    },
  }, field("Top up: amount", { name: "amount", inputmode: "decimal", required: true, placeholder: "10.00" }),
  field("Currency (ISO code)", { name: "currency", required: true, value: "usd", maxlength: "3" }),
  h("button", { type: "submit" }, "Pay with card"));
  const usageRows = usage.map((u) => h("tr", {},
    h("td", {}, h("code", {}, u.model)), h("td", {}, u.prompt_tokens), h("td", {}, u.completion_tokens),
    h("td", {}, usd(u.cost_micros)), h("td", {}, u.status), h("td", {}, u.latency_ms + " ms")));
  const entryRows = entries.filter((e) => e.kind !== "hold" && e.kind !== "release").slice(0, 50).map((e) => h("tr", {},
    h("td", {}, when(e.created_at)), h("td", {}, e.kind), h("td", {}, usd(e.amount_micros)), h("td", {}, e.note || "")));
  render(h("h1", {}, "Balance and usage"),
    h("p", {}, "Balance ", h("strong", {}, usd(me.balance_micros)), " · reserved by running requests ", usd(me.reserved_micros),
      " · available ", h("strong", {}, usd(me.available_micros))),
    h("h2", {}, "Spend per day"), spendChart(entries),
    topup, redeem,
    h("h2", {}, "Recent requests"), h("a", { href: "/api/v1/usage.csv", download: "usage.csv" }, "Export all as CSV"),
    h("div", { class: "table-wrap" }, h("table", {},
      h("thead", {}, h("tr", {}, ["Model", "Prompt tokens", "Completion tokens", "Cost", "Status", "Latency"].map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, usageRows))),
    h("h2", {}, "Ledger"),
    h("div", { class: "table-wrap" }, h("table", {},
      h("thead", {}, h("tr", {}, ["When", "Kind", "Amount", "Note"].map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, entryRows))));
}

async function viewPlayground() {
  // Chat models only: speech models (the entries with a `kind`) have their own endpoints.
  const list = (await loadModels()).filter((m) => !m.kind && m.license.commercial_use);
  const label = (m) => `${m.id} — $${m.pricing.input_per_million_usd} in / $${m.pricing.output_per_million_usd} out per 1M`;
  // Servable chat models first; base models (they continue text, they do not answer turns) and
  // models this server cannot serve are listed, marked and not selectable.
  const ready = list.filter((m) => m.available && !m.base);
  const base = list.filter((m) => m.base), absent = list.filter((m) => !m.available && !m.base);
  const select = h("select", { name: "model", id: "pg-model" },
    ready.map((m) => h("option", { value: m.id }, label(m))),
    base.length ? h("optgroup", { label: "Base models: they continue text and are not trained for chat; use the API" },
      base.map((m) => h("option", { value: m.id, disabled: "" }, `${label(m)} (base model)`))) : [],
    absent.length ? h("optgroup", { label: "Not servable on this server" },
      absent.map((m) => h("option", { value: m.id, disabled: "" }, `${label(m)} (${m.unavailable_reason})`))) : []);
  const attribution = h("div", { class: "muted", id: "pg-licence" });
  const langs = h("p", { class: "muted", id: "pg-langs" });
  const showLangs = () => {
    const m = list.find((x) => x.id === select.value);
    langs.textContent = m && m.languages
      ? "Token cost vs English: " + Object.entries(m.languages).slice(0, 8).map(([k, v]) => `${k} ×${Number(v).toFixed(2)}`).join(", ") + "…"
      : "Per-language token costs not measured for this model.";
    attribution.replaceChildren(...(m ? licence(m.license) : []).flat());
  };
  select.addEventListener("change", showLangs);
  showLangs();
  const answer = h("div", { class: "answer", id: "pg-answer", "aria-live": "polite" });
  const meta = h("p", { class: "muted", id: "pg-meta" });
  const form = h("form", {
    onsubmit: async (ev) => {
      ev.preventDefault();
      const f = new FormData(form);
      const messages = [];
      if (f.get("system")) messages.push({ role: "system", content: f.get("system") });
      messages.push({ role: "user", content: f.get("user") });
      answer.textContent = "";
      meta.textContent = "…";
      try {
        const r = await fetch("/v1/chat/completions", {
          method: "POST", credentials: "same-origin", headers: { "content-type": "application/json" },
          body: JSON.stringify({ model: f.get("model"), messages, stream: true, max_tokens: Number(f.get("max_tokens")) || 128,
            temperature: Number(f.get("temperature")), stream_options: { include_usage: true } }),
        });
        if (!r.ok) {
          const v = await r.json().catch(() => ({}));
          throw new Error((v.error && v.error.message) || `HTTP ${r.status}`);
        }
        const reader = r.body.getReader();
        const dec = new TextDecoder();
        let buf = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
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
              if (delta && delta.content) answer.textContent += delta.content;
              if (c.usage) {
                const cost = c.service ? usd(c.service.cost_micros) : "";
                meta.textContent = `${c.usage.prompt_tokens} prompt + ${c.usage.completion_tokens} completion tokens · ${cost}`;
              }
            }
          }
        }
        refreshMe();
      } catch (e) {
        meta.textContent = "";
        status(e.message, true);
      }
    },
  },
    h("label", {}, "Model", select), langs, attribution,
    h("label", {}, "System message (optional)", h("textarea", { name: "system", rows: "2" })),
    h("label", {}, "Your message", h("textarea", { name: "user", rows: "4", required: true })),
    field("Max tokens", { name: "max_tokens", type: "number", min: "1", max: "4096", value: "128" }),
    field("Temperature (0 = always the most likely token)", { name: "temperature", type: "number", min: "0", max: "2", step: "0.1", value: "0.7" }),
    h("button", { type: "submit" }, "Send"));
  render(h("h1", {}, "Playground"),
    h("p", { class: "muted" }, "Replies are paid from your balance, with their own rate limit."),
    form, h("h2", {}, "Answer"), answer, meta);
}

// Admins: accounts with balances, and signed adjustments with a reason.
async function viewAdmin(after) {
  const { accounts, next_after } = await api("GET", `/api/v1/admin/accounts?limit=50&after=${after || 0}`);
  const rows = accounts.map((a) => {
    const form = h("form", {
      class: "inline",
      onsubmit: async (ev) => {
        ev.preventDefault();
        const f = new FormData(form);
        try {
          await api("POST", `/api/v1/admin/accounts/${a.id}/adjust`, { amount_usd: f.get("amount"), reason: f.get("reason") });
          status(`Adjusted ${a.email}.`);
          viewAdmin(after);
        } catch (e) { status(e.message, true); }
      },
    },
      field(`Amount in USD for ${a.email} (negative to debit)`, { name: "amount", inputmode: "decimal", required: true, placeholder: "5.00" }),
      field("Reason (on the ledger)", { name: "reason", required: true, maxlength: "500" }),
      h("button", { type: "submit", class: "secondary" }, "Adjust"));
    return h("tr", {},
      h("td", {}, a.id), h("td", {}, a.email), h("td", {}, a.verified ? "yes" : "no"),
      h("td", {}, usd(a.balance_micros)), h("td", {}, usd(a.available_micros)), h("td", {}, form));
  });
  render(h("h1", {}, "Accounts"),
    h("div", { class: "table-wrap" }, h("table", {},
      h("thead", {}, h("tr", {}, ["Id", "E-mail", "Verified", "Balance", "Available", "Adjust"].map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, rows))),
    next_after && accounts.length === 50 ? h("button", { type: "button", class: "secondary", onclick: () => viewAdmin(next_after) }, "Next page") : "");
}

function viewHome() {
  render(h("h1", {}, "tollgate"),
    h("p", {}, "Open-weight language models behind an OpenAI-compatible API, paid from a prepaid balance."),
    h("p", {}, me ? h("a", { href: "#/keys" }, "Manage your API keys") : h("a", { href: "#/signup" }, "Create an account"),
      " · ", h("a", { href: "#/models" }, "See models and prices")));
}

async function route() {
  status("");
  const params = new URLSearchParams(location.search);
  if (location.pathname === "/reset" && params.get("token")) return viewReset(params.get("token"));
  const page = location.hash.replace(/^#\//, "") || "";
  const needsAuth = ["keys", "balance", "playground", "admin"].includes(page);
  if (needsAuth && !me) {
    status("Sign in first.");
    return viewSignin();
  }
  try {
    switch (page) {
      case "models": return await viewModels();
      case "signup": return viewSignup();
      case "signin": return viewSignin();
      case "keys": return await viewKeys();
      case "balance": return await viewBalance();
      case "playground": return await viewPlayground();
      case "admin": return await viewAdmin();
      default: return viewHome();
    }
  } catch (e) {
    if (e.status === 401) { me = null; await refreshMe(); return viewSignin(); }
    status(e.message, true);
  }
}

document.addEventListener("DOMContentLoaded", async () => {
  $("#signout").addEventListener("click", async () => {
    try { await api("POST", "/api/v1/auth/signout", {}); } catch (e) { /* already out */ }
    await refreshMe();
    location.hash = "#/";
    status("Signed out.");
  });
  window.addEventListener("hashchange", route);
  await refreshMe();
  providers = await api("GET", "/api/v1/auth/providers").catch(() => null);
  const params = new URLSearchParams(location.search);
  const checkout = params.get("topup") === "success" && params.get("checkout_id");
  const cancelled = params.get("topup") === "cancelled";
  if (params.has("topup")) history.replaceState(null, "", checkout ? "/#/balance" : "/" + location.hash);
  await route();
  if (checkout) awaitTopup(checkout);
  else if (cancelled) status("Top-up cancelled; nothing was charged.");
});
