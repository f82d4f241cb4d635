// API keys: create (with an optional spend limit and expiry), rename, change the limit or the
// expiry, revoke, and see what each key spent.
import {
  h, api, render, field, form, feedback, actionButton, table, usd, when, day, decimal, dateToUnix, unixToDate,
} from "./core.js";

// What a key has used of its limit: "$0.000012 of $0.000100", with a warning near the end.
function spent(k) {
  const used = k.spent_micros + k.reserved_micros;
  if (k.spend_limit_micros == null) return [usd(used), h("div", { class: "muted" }, "no limit")];
  const pct = k.spend_limit_micros > 0 ? used / k.spend_limit_micros : 1;
  const label = `${usd(used)} of ${usd(k.spend_limit_micros)} (${Math.floor(pct * 100)}%)`;
  return [label,
    pct >= 1 ? h("div", { class: "warn" }, "Limit reached")
      : pct >= 0.8 ? h("div", { class: "warn" }, "Near the limit: a request whose hold does not fit is refused") : null];
}

const STATES = { active: "Active", revoked: "Revoked", expired: "Expired" };

function renameForm(k, reload) {
  return form({ class: "inline" }, async (d) => {
    await api("PATCH", `/api/v1/keys/${k.id}`, { name: d.get("name") });
    await reload(`Key renamed to “${d.get("name")}”.`);
  },
  field(`New name for ${k.name}`, { name: "name", maxlength: "100", required: true, value: k.name }),
  h("button", { type: "submit", class: "secondary" }, "Save name"));
}

// Limit and expiry: only what changed is sent (absent = unchanged, null = removed).
function limitForm(k, reload) {
  const oldLimit = k.spend_limit_micros == null ? "" : decimal(k.spend_limit_micros);
  const oldExpiry = unixToDate(k.expires_at);
  return form({ class: "inline" }, async (d) => {
    const body = {};
    const limit = d.get("spend_limit_usd").trim(), expiry = d.get("expires_at");
    if (limit !== oldLimit) body.spend_limit_usd = limit || null;
    if (expiry !== oldExpiry) body.expires_at = dateToUnix(expiry, true);
    if (!Object.keys(body).length) throw new Error("Nothing changed.");
    await api("PATCH", `/api/v1/keys/${k.id}`, body);
    await reload(`Key “${k.name}” updated.`);
  },
  field("Spend limit in USD", { name: "spend_limit_usd", inputmode: "decimal", value: oldLimit, placeholder: "no limit" }, "Empty: no limit."),
  field("Expires at the end of", { name: "expires_at", type: "date", value: oldExpiry }, "Empty: never expires."),
  h("button", { type: "submit", class: "secondary" }, "Save limit and expiry"));
}

function actions(k, reload) {
  if (k.state === "revoked") return h("a", { href: `#/balance?key=${k.id}` }, "Usage");
  const revoke = actionButton("Revoke", { class: "secondary", "aria-label": `Revoke key ${k.name}` }, async () => {
    if (!confirm(`Revoke "${k.name}"? Requests with it will fail at once.`)) return;
    await api("DELETE", `/api/v1/keys/${k.id}`);
    await reload("Key revoked.");
  });
  return h("div", { class: "actions" },
    h("a", { href: `#/balance?key=${k.id}`, "aria-label": `Usage of key ${k.name}` }, "Usage"),
    h("details", {}, h("summary", { "aria-label": `Rename key ${k.name}` }, "Rename"), renameForm(k, reload)),
    h("details", {}, h("summary", { "aria-label": `Limit and expiry of key ${k.name}` }, "Limit and expiry"), limitForm(k, reload)),
    revoke);
}

function keyRow(k, reload) {
  return [
    h("strong", {}, k.name),
    h("code", { class: "nowrap" }, k.prefix + "…"),
    when(k.created_at),
    when(k.last_used_at),
    k.expires_at ? day(k.expires_at) : "never",
    spent(k),
    String(k.requests),
    STATES[k.state] || k.state,
    actions(k, reload),
  ];
}

function createForm(reload) {
  return form({}, async (d) => {
    const body = { name: d.get("name") };
    const limit = d.get("spend_limit_usd").trim(), expiry = d.get("expires_at");
    if (limit) body.spend_limit_usd = limit;
    if (expiry) body.expires_at = dateToUnix(expiry, true);
    const created = await api("POST", "/api/v1/keys", body);
    await reload(null, created);
  },
  field("Name", { name: "name", maxlength: "100", required: true, placeholder: "laptop" }),
  field("Spend limit in USD (optional)", { name: "spend_limit_usd", inputmode: "decimal", placeholder: "5.00" },
    "Requests with this key are refused once it has spent this much."),
  field("Expires at the end of (optional)", { name: "expires_at", type: "date" }, "After this day the key stops working."),
  h("button", { type: "submit" }, "Create key"));
}

function freshKey(created) {
  const copy = actionButton("Copy", {}, async (b) => {
    try {
      await navigator.clipboard.writeText(created.key);
      feedback(b, "Copied.");
    } catch (e) {
      feedback(b, "Copy failed: select the key and copy it.", true);
    }
  });
  return h("div", { class: "newkey", role: "alert" },
    h("p", { class: "warn" }, "Copy this key now. It is stored only as a hash and cannot be shown again."),
    h("p", {}, h("code", { id: "new-key" }, created.key)),
    created.warning ? h("p", {}, created.warning) : null,
    copy);
}

const COLS = ["Name", "Key", "Created", "Last used", "Expires", "Spent", "Requests", "State", "Actions"];

// `message` (after an edit) is shown above the table; `created` (after creating) shows the key.
export async function viewKeys(message, created) {
  const { keys } = await api("GET", "/api/v1/keys");
  const reload = (msg, made) => viewKeys(msg, made);
  const list = table(COLS, keys.map((k) => keyRow(k, reload)), {
    empty: "No keys yet: create one above, then call the API with it.",
  });
  const note = message ? h("p", { class: "feedback ok", role: "status" }, message) : null;
  render("API keys", h("h1", {}, "API keys"),
    created ? freshKey(created) : null,
    createForm(reload),
    h("p", { class: "muted" }, "Use a key with any OpenAI SDK: base URL ", h("code", {}, location.origin + "/v1"), "."),
    h("h2", {}, "Your keys"), note, list);
}
