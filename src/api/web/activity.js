// Balance and usage: the balance (with low-balance and starter-credit notes), top-up and
// redeem forms, spend per day, the recent requests with filters and paging, and the ledger.
import {
  h, s, $, state, api, render, field, form, feedback, table, empty, requireMe, loadModels, usd, when, dateToUnix,
} from "./core.js";

const WORDS = { grant: "Starter credit", topup: "Card top-up", redeem: "Code redeemed", settle: "Request charge", adjustment: "Adjustment by an admin" };

function balanceLine(me) {
  return h("p", { class: "balance" }, "Balance ", h("strong", {}, usd(me.balance_micros)),
    " · reserved by running requests ", usd(me.reserved_micros), " · available ", h("strong", {}, usd(me.available_micros)));
}

function notices(me, entries) {
  const p = state.providers || {};
  const out = [];
  if (p.low_balance_micros != null && me.available_micros < p.low_balance_micros) {
    out.push(h("div", { class: "notice warn-box", role: "note" },
      h("strong", {}, "Low balance. "),
      `Only ${usd(me.available_micros)} is available. Requests are refused once the balance cannot cover their hold `,
      "(the prompt plus max_tokens at the model's prices). ",
      p.payments ? "Top up with a card or redeem a code below." : "Redeem a code below; the operator of this server can give you one."));
  }
  const grant = entries.find((e) => e.kind === "grant");
  const seenKey = `tollgate.starter-seen.${me.id}`;
  let firstVisit = false;
  try { firstVisit = !localStorage.getItem(seenKey); localStorage.setItem(seenKey, "1"); } catch (e) { /* storage off */ }
  const starter = grant ? grant.amount_micros : p.starter_micros;
  if (starter > 0 && (grant || firstVisit)) {
    out.push(h("p", { class: "notice" },
      `Your account started with ${usd(starter)} of credit on e-mail verification: enough to try the models. `,
      "Requests are paid from it, then from codes you redeem", p.payments ? " or card top-ups." : "."));
  }
  return out;
}

function ledgerTable(entries) {
  const shown = entries.filter((e) => e.kind !== "hold" && e.kind !== "release").slice(0, 50);
  return table(["When", "What", "Amount", "Request id", "Note"], shown.map((e) => [
    when(e.created_at), WORDS[e.kind] || e.kind, usd(e.amount_micros),
    e.request_id ? h("code", {}, e.request_id) : "", e.note || "",
  ]), { empty: "No ledger entries yet." });
}

function redeemForm(onRedeemed) {
  return form({}, async (d, f) => {
    const r = await api("POST", "/api/v1/redeem", { code: d.get("code") });
    f.reset();
    await onRedeemed();
    feedback(f, `Redeemed ${usd(r.credited_micros)}.`);
  }, field("Redeem a code", { name: "code", required: true, autocomplete: "off", spellcheck: "false" }),
  h("button", { type: "submit" }, "Redeem"));
}

function topupForm() {
  return form({}, async (d) => {
    const r = await api("POST", "/api/v1/topups", { amount: d.get("amount"), currency: d.get("currency") });
    location.href = r.checkout_url;
  }, field("Top up: amount", { name: "amount", inputmode: "decimal", required: true, placeholder: "10.00" }),
  field("Currency (ISO code)", { name: "currency", required: true, value: "usd", maxlength: "3" }),
  h("button", { type: "submit" }, "Pay with card"));
}

// ---- spend per day ----

// A round step for about four ticks up to `max` micros (at least 1 micro).
function niceStep(max) {
  const raw = Math.max(1, max / 4);
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((f) => f * mag).find((v) => v >= raw);
  return Math.max(1, Math.round(step));
}

// An axis label: as many decimals as the amount needs, at least two ("$0.00025", "$1.50").
function tickUsd(micros) {
  const [whole, frac = ""] = (micros / 1e6).toFixed(6).replace(/0+$/, "").split(".");
  return `$${whole}.${frac.padEnd(2, "0")}`;
}
const PALETTE = ["#0b5cad", "#c2410c", "#15803d", "#7e22ce", "#b91c1c", "#0f766e", "#a16207", "#4b5563"];
const dayLabel = (d) => {
  const [y, m, dd] = d.split("-").map(Number);
  return new Date(Date.UTC(y, m - 1, dd)).toLocaleDateString(undefined, { month: "numeric", day: "numeric", timeZone: "UTC" });
};

function chartSvg(days, models, colour) {
  const W = Math.round(Math.max(280, Math.min(860, $("#main").clientWidth - 32))), H = 220;
  const left = 70, right = 8, top = 12, bottom = 30, plotH = H - top - bottom;
  const step = niceStep(Math.max(...days.map((d) => d.total_micros)));
  const max = step * Math.max(1, Math.ceil(Math.max(...days.map((d) => d.total_micros)) / step));
  const bw = (W - left - right) / days.length;
  const every = Math.ceil(40 / bw); // a label needs about 40 px at 12 px
  const y = (v) => top + plotH - (v / max) * plotH;
  const ticks = [];
  for (let v = 0; v <= max; v += step) {
    ticks.push(s("line", { x1: left, x2: W - right, y1: y(v), y2: y(v), class: "grid" }),
      s("text", { x: left - 6, y: y(v) + 4, "text-anchor": "end", class: "tick" }, tickUsd(v)));
  }
  const bars = days.map((d, i) => {
    let acc = 0;
    const x = left + i * bw + bw * 0.15;
    const segs = models.filter((m) => d.models[m]).map((m) => {
      const v = d.models[m];
      const rect = s("rect", { x, y: y(acc + v), width: bw * 0.7, height: Math.max(1, y(acc) - y(acc + v)), fill: colour(m) },
        s("title", {}, `${d.day}: ${m} ${usd(v)}`));
      acc += v;
      return rect;
    });
    const label = (days.length - 1 - i) % every === 0
      ? s("text", { x: left + i * bw + bw / 2, y: H - 10, "text-anchor": "middle", class: "tick" }, dayLabel(d.day)) : null;
    return [segs, label];
  });
  return s("svg", { class: "chart", viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: "img", "aria-labelledby": "chart-cap" },
    ticks, s("line", { x1: left, x2: left, y1: top, y2: top + plotH, class: "axis" }), bars);
}

function spendChart(days) {
  const total = days.reduce((a, d) => a + d.total_micros, 0);
  if (!total) return empty("No spend in the last 14 days.");
  const sums = {};
  days.forEach((d) => Object.entries(d.models).forEach(([m, v]) => (sums[m] = (sums[m] || 0) + v)));
  const models = Object.keys(sums).sort((a, b) => sums[b] - sums[a]);
  const colour = (m) => PALETTE[models.indexOf(m) % PALETTE.length];
  const legend = h("ul", { class: "legend" }, models.map((m) => h("li", {},
    s("svg", { width: 12, height: 12, "aria-hidden": "true" }, s("rect", { width: 12, height: 12, fill: colour(m) })),
    " ", h("code", {}, m), ` ${usd(sums[m])}`)));
  const numbers = table(["Day (UTC)", "Spent", "By model"], days.map((d) => [
    d.day, usd(d.total_micros), Object.entries(d.models).map(([m, v]) => `${m} ${usd(v)}`).join(", ") || "—",
  ]));
  return h("figure", { class: "spend" }, chartSvg(days, models, colour),
    h("figcaption", { id: "chart-cap" }, `Spent in the last 14 days: ${usd(total)}, per day and model (UTC days).`),
    legend,
    h("details", {}, h("summary", {}, "The same numbers as a table"), numbers));
}

// ---- recent requests ----

const STATUSES = { ok: "ok", cancelled: "cancelled (client left)", failed: "failed (not charged)", undelivered: "undelivered" };

const keyName = (u) => u.key_name || (u.key_id == null ? "Playground" : `key #${u.key_id}`);

function requestRow(u) {
  return [
    when(u.created_at), keyName(u), h("code", {}, u.model), h("code", { class: "id" }, u.request_id),
    STATUSES[u.status] || u.status, String(u.prompt_tokens), String(u.completion_tokens), usd(u.cost_micros),
    `${u.latency_ms} ms`,
  ];
}

function select(label, name, value, options) {
  return h("label", {}, label, h("select", { name },
    options.map(([v, text]) => h("option", { value: v, selected: String(v) === String(value) }, text))));
}

// The filters as /api/v1/usage parameters (empty ones left out).
function usageParams(f) {
  const p = new URLSearchParams();
  if (f.get("key")) p.set("key_id", f.get("key"));
  if (f.get("model")) p.set("model", f.get("model"));
  if (f.get("status")) p.set("status", f.get("status"));
  if (f.get("from")) p.set("since", dateToUnix(f.get("from")));
  if (f.get("to")) p.set("until", dateToUnix(f.get("to"), true) + 1); // exclusive: the next midnight
  return p;
}

function filterForm(query, keys, models) {
  const modelIds = [...new Set([...models.map((m) => m.id), query.get("model")].filter(Boolean))];
  const limit = Number(query.get("limit")) || 50;
  const sizes = [...new Set([10, 25, 50, 100, limit])].sort((a, b) => a - b);
  return h("form", { class: "filters", "aria-label": "Filter requests" },
    select("Key", "key", query.get("key") || "", [["", "All keys"], ["playground", "Playground"],
      ...keys.map((k) => [String(k.id), k.state === "active" ? k.name : `${k.name} (${k.state})`])]),
    select("Model", "model", query.get("model") || "", [["", "All models"], ...modelIds.map((m) => [m, m])]),
    select("Status", "status", query.get("status") || "", [["", "Any status"], ...Object.entries(STATUSES)]),
    h("label", {}, "From", h("input", { type: "date", name: "from", value: query.get("from") || "" })),
    h("label", {}, "To", h("input", { type: "date", name: "to", value: query.get("to") || "" })),
    select("Rows per page", "limit", limit, sizes.map((n) => [n, String(n)])));
}

// Filters, the table, its pages ("Older" follows next_before, "Newest" starts over) and a CSV
// export of the same filter. The filters live in the address (#/balance?key=3) so a key's
// "Usage" link lands here filtered.
function requestsSection(query, keys, models) {
  const filters = filterForm(query, keys, models);
  const out = h("div", { "aria-live": "polite" });
  const csv = h("a", { href: "/api/v1/usage.csv", download: "usage.csv" }, "Export as CSV");
  const pager = h("div", { class: "pager" });
  const cursors = []; // the `before` of each page shown so far; [] = the newest page
  async function load(before) {
    const f = new FormData(filters);
    const p = usageParams(f);
    csv.href = "/api/v1/usage.csv" + (p.toString() ? `?${p}` : "");
    const filtered = p.toString() !== "";
    p.set("limit", f.get("limit"));
    if (before != null) p.set("before", before);
    const hash = new URLSearchParams([...f].filter(([k, v]) => v && !(k === "limit" && v === "50")));
    history.replaceState(null, "", "#/balance" + (hash.toString() ? `?${hash}` : ""));
    out.setAttribute("aria-busy", "true");
    try {
      const { usage, next_before: next } = await api("GET", `/api/v1/usage?${p}`);
      out.replaceChildren(table(["Time", "Key", "Model", "Request id", "Status", "Prompt tokens", "Completion tokens", "Cost", "Latency"],
        usage.map(requestRow), {
          empty: filtered ? "No request matches these filters."
            : ["No requests yet: ", h("a", { href: "#/keys" }, "create a key"), " and call the API, or try the ", h("a", { href: "#/playground" }, "playground"), "."],
        }));
      pager.replaceChildren(
        h("button", { type: "button", class: "secondary", disabled: !cursors.length, onclick: () => { cursors.length = 0; load(null); } }, "Newest"),
        h("span", { class: "muted" }, ` Page ${cursors.length + 1} `),
        h("button", { type: "button", class: "secondary", disabled: !next, onclick: () => { cursors.push(next); load(next); } }, "Older"));
    } catch (e) {
      if (!e.sessionEnded) feedback(filters, e.message, true);
    } finally {
      out.removeAttribute("aria-busy");
    }
  }
  filters.addEventListener("change", () => { cursors.length = 0; feedback(filters, null); load(null); });
  filters.addEventListener("submit", (ev) => ev.preventDefault());
  load(null);
  return h("section", { class: "requests" }, filters, h("p", {}, csv, h("span", { class: "muted" }, " (the same filters, every page)")), out, pager);
}

export async function viewBalance(query) {
  const me = await requireMe();
  const [{ entries }, daily, { keys }, models] = await Promise.all([
    api("GET", "/api/v1/entries?limit=500"),
    api("GET", "/api/v1/usage/daily?days=14").catch(() => ({ days: [] })),
    api("GET", "/api/v1/keys"),
    loadModels().catch(() => []),
  ]);
  const summary = h("div", {}, balanceLine(me), notices(me, entries));
  const ledger = h("div", {}, ledgerTable(entries));
  const refresh = async () => {
    const [m, { entries: e }] = await Promise.all([requireMe(), api("GET", "/api/v1/entries?limit=500")]);
    summary.replaceChildren(balanceLine(m), ...notices(m, e));
    ledger.replaceChildren(ledgerTable(e));
  };
  render("Balance and usage", h("h1", {}, "Balance and usage"), summary,
    h("h2", {}, "Add credit"),
    state.providers && state.providers.payments ? topupForm() : null,
    redeemForm(refresh),
    h("h2", {}, "Spend per day"), spendChart(daily.days || []),
    h("h2", {}, "Recent requests"), requestsSection(query, keys, models),
    h("h2", {}, "Ledger"),
    h("p", { class: "muted" }, "Money in and out of the balance. Holds on running requests are not listed; their charge is."),
    ledger);
}
