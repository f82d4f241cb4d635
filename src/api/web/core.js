// tollgate dashboard: shared helpers. The DOM is built with `h()` (never innerHTML), so text
// from the server is never parsed as HTML.

// What every view shares: the signed-in account (or null), the cached /v1/models list, the
// sign-in and payment settings from /api/v1/auth/providers, and where to go after signing in.
export const state = { me: null, models: null, providers: null, returnTo: null };
// Set by app.js: `route()` re-renders the current hash, `unauthorized()` handles a session that
// ended elsewhere, `landing()` says where a fresh sign-in goes.
export const hooks = { route: null, unauthorized: null, landing: null };

export const $ = (sel, root = document) => root.querySelector(sel);

function setAttrs(el, attrs) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
    else if (v === true) el.setAttribute(k, "");
    else if (v !== false && v != null) el.setAttribute(k, v);
  }
}

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c != null && c !== false && c !== "") el.append(c instanceof Node ? c : String(c));
  }
}

export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

// The same for SVG elements.
export function s(tag, attrs, ...children) {
  const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

// The page-level status bar (sign-out, a top-up's progress); feedback on a form goes beside it.
export function status(msg, isError) {
  const el = $("#status");
  el.textContent = msg || "";
  el.className = isError ? "error" : "";
}

// Calls the dashboard API; returns `data` or throws an Error with the envelope's message, code,
// field and the HTTP status. A 401 while signed in (the session ended elsewhere) is handed to
// `hooks.unauthorized` unless `quiet`.
export async function api(method, path, body, { quiet = false } = {}) {
  const opts = { method, credentials: "same-origin", headers: {} };
  if (body !== undefined) {
    opts.headers["content-type"] = "application/json";
    opts.body = JSON.stringify(body);
  }
  const r = await fetch(path, opts);
  const v = await r.json().catch(() => ({ ok: false, error: { message: `HTTP ${r.status}` } }));
  if (v.ok) return v.data;
  const err = v.error || {};
  const e = new Error(err.message || `HTTP ${r.status}`);
  Object.assign(e, { code: err.code, field: err.field, status: r.status });
  if (r.status === 401 && !quiet && state.me && !path.startsWith("/api/v1/auth/") && hooks.unauthorized) {
    e.sessionEnded = true;
    hooks.unauthorized();
  }
  throw e;
}

// ---- formatting ----

export const usd = (micros) =>
  (micros < 0 ? "-$" : "$") + (Math.abs(micros) / 1e6).toFixed(micros % 10000 === 0 ? 2 : 6);
export const when = (secs) => (secs ? new Date(secs * 1000).toLocaleString() : "—");
export const day = (secs) => (secs ? new Date(secs * 1000).toLocaleDateString() : "—");
// Micros as a plain decimal for an input field ("2.5", "0.0001").
export const decimal = (micros) => (micros / 1e6).toFixed(6).replace(/\.?0+$/, "");
// A date input's value ("2026-11-25") as unix seconds: the start or the end of that local day.
export function dateToUnix(value, endOfDay) {
  if (!value) return null;
  const [y, m, d] = value.split("-").map(Number);
  const t = endOfDay ? new Date(y, m - 1, d, 23, 59, 59) : new Date(y, m - 1, d);
  return Math.floor(t.getTime() / 1000);
}
// Unix seconds as a date input's value, in local time.
export function unixToDate(secs) {
  if (!secs) return "";
  const t = new Date(secs * 1000);
  const p = (n) => String(n).padStart(2, "0");
  return `${t.getFullYear()}-${p(t.getMonth() + 1)}-${p(t.getDate())}`;
}

// ---- page building ----

let flash = null; // a message for the next rendered page: {msg, isError}

// A message shown at the top of the next page rendered (it survives the route change that
// follows, unlike the status bar): "Password changed", "Your session ended".
export function setFlash(msg, isError) {
  flash = { msg, isError };
}

// Replaces the page: sets its title and focuses it so screen readers start there.
export function render(title, ...nodes) {
  document.title = title ? `${title} · tollgate` : "tollgate";
  const main = $("#main");
  const note = flash && h("p", { class: flash.isError ? "flash error" : "flash", role: flash.isError ? "alert" : "status" }, flash.msg);
  flash = null;
  main.replaceChildren(...[note, ...nodes].flat(Infinity).filter((n) => n != null && n !== false && n !== ""));
  main.focus();
}

export function navigate(hash) {
  if (location.hash === hash) hooks.route();
  else location.hash = hash;
}

let hintSeq = 0;

// A labelled input; a hint goes after the label (described-by, not part of the name).
export function field(label, attrs, hint) {
  if (!hint) return h("label", {}, label, h("input", attrs));
  const id = `hint-${++hintSeq}`;
  return h("div", { class: "field" },
    h("label", {}, label, h("input", { ...attrs, "aria-describedby": id })),
    h("span", { class: "hint", id }, hint));
}

// An empty state: a sentence (and maybe a link) where a table would be.
export function empty(...content) {
  return h("p", { class: "empty" }, ...content);
}

// A table that turns into stacked cards on a phone: every cell carries its column's name in
// `data-label`, shown by the stylesheet when the header row is hidden. `rows` are arrays of
// cells (or ready <tr> elements); with no rows, `opts.empty` is shown instead.
export function table(cols, rows, opts = {}) {
  if (!rows.length && opts.empty) return empty(...[opts.empty].flat());
  // One wrapper per cell, so a card's label and value stay two grid columns.
  const tr = (cells) => h("tr", {}, cells.map((c, i) => h("td", { "data-label": cols[i] || null }, h("div", { class: "v" }, c))));
  return h("div", { class: "table-wrap" },
    h("table", { class: [opts.plain ? null : "cards", opts.cls].filter(Boolean).join(" ") || null },
      opts.caption ? h("caption", {}, opts.caption) : null,
      opts.head || h("thead", {}, h("tr", {}, cols.map((c) => h("th", { scope: "col" }, c)))),
      h("tbody", {}, rows.map((r) => (r instanceof Node ? r : tr(r))))));
}

// ---- feedback beside the control that caused it ----

const feedbacks = new WeakMap(); // anchor element -> its message element
let fbSeq = 0;

// Puts `msg` right after `anchor` (a form, a button, a field's label), replacing the previous
// message there; an error is an alert, anything else a status. No `msg` clears it.
export function feedback(anchor, msg, isError) {
  const old = feedbacks.get(anchor);
  if (!msg) {
    if (old) old.remove();
    feedbacks.delete(anchor);
    return null;
  }
  const el = h("div", {
    class: isError ? "feedback error" : "feedback ok", role: isError ? "alert" : "status", id: `fb-${++fbSeq}`,
  }, ...[msg].flat());
  if (old && old.isConnected) old.replaceWith(el);
  else anchor.after(el);
  feedbacks.set(anchor, el);
  return el;
}

// Shows an API error next to the field it names (`error.field`), else after the form.
export function showError(form, e) {
  if (e.sessionEnded) return;
  const input = e.field && form.elements.namedItem(e.field);
  if (input && input.closest && !input.hidden) {
    const anchor = input.closest("label") || input;
    const el = feedback(anchor, e.message, true);
    const own = input.dataset.describedby ?? (input.getAttribute("aria-describedby") || "");
    input.dataset.describedby = own;
    input.setAttribute("aria-invalid", "true");
    input.setAttribute("aria-describedby", `${own} ${el.id}`.trim());
    input.focus();
  } else {
    feedback(form, e.message, true);
  }
}

export function clearFeedback(form) {
  feedback(form, null);
  for (const input of form.querySelectorAll("[aria-invalid]")) {
    input.removeAttribute("aria-invalid");
    if (input.dataset.describedby) input.setAttribute("aria-describedby", input.dataset.describedby);
    else input.removeAttribute("aria-describedby");
    feedback(input.closest("label") || input, null);
  }
}

// A form whose submit runs `handler(formData, form)`: feedback cleared first, the submit
// button disabled while it runs, and a thrown API error shown next to its field.
export function form(attrs, handler, ...children) {
  const el = h("form", {
    ...attrs,
    onsubmit: async (ev) => {
      ev.preventDefault();
      clearFeedback(el);
      const buttons = [...el.querySelectorAll("button[type=submit]")];
      buttons.forEach((b) => (b.disabled = true));
      try {
        await handler(new FormData(el), el);
      } catch (e) {
        showError(el, e);
      } finally {
        buttons.forEach((b) => (b.disabled = false));
      }
    },
  }, ...children);
  return el;
}

// A button whose click runs `handler`; an error is shown right after the button.
export function actionButton(label, attrs, handler) {
  const b = h("button", {
    type: "button", ...attrs,
    onclick: async () => {
      feedback(b, null);
      b.disabled = true;
      try {
        await handler(b);
      } catch (e) {
        if (!e.sessionEnded) feedback(b, e.message, true);
      } finally {
        b.disabled = false;
      }
    },
  }, label);
  return b;
}

// ---- shared data ----

function updateNav() {
  const me = state.me;
  document.querySelectorAll("[data-auth]").forEach((el) => (el.hidden = !me));
  document.querySelectorAll("[data-anon]").forEach((el) => (el.hidden = !!me));
  document.querySelectorAll("[data-admin]").forEach((el) => (el.hidden = !(me && me.admin)));
}

// Re-reads the account (null when signed out) and shows the matching navigation.
export async function refreshMe() {
  try {
    state.me = await api("GET", "/api/v1/account", undefined, { quiet: true });
  } catch (e) {
    state.me = null;
  }
  updateNav();
  return state.me;
}

// The account for a page that needs it: a 401 here means the session ended elsewhere.
export async function requireMe() {
  state.me = await api("GET", "/api/v1/account");
  updateNav();
  return state.me;
}

export async function loadModels() {
  if (!state.models) {
    const r = await fetch("/v1/models");
    if (!r.ok) throw new Error(`Could not load the models (HTTP ${r.status}).`);
    state.models = (await r.json()).data;
  }
  return state.models;
}

// A licence: its name (linked), the notice it requires shown beside the model, and the use
// policy it requires be passed on to users.
export function licence(l) {
  return [
    h("a", { href: l.url, rel: "noopener" }, l.name),
    l.attribution ? h("div", { class: "muted attribution" }, l.attribution) : null,
    l.use_policy ? h("div", {}, h("a", { href: l.use_policy, rel: "noopener" }, "Use policy")) : null,
  ];
}
