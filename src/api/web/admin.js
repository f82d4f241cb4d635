// Admins: accounts with balances, and signed adjustments with a reason.
import { h, api, render, field, form, feedback, table, usd } from "./core.js";

const PAGE = 50;

function adjustForm(a, after, cells) {
  return form({ class: "inline" }, async (d, f) => {
    await api("POST", `/api/v1/admin/accounts/${a.id}/adjust`, { amount_usd: d.get("amount"), reason: d.get("reason") });
    f.reset();
    // Show the new balance in place (the form and its message stay).
    const { accounts } = await api("GET", `/api/v1/admin/accounts?limit=${PAGE}&after=${after}`);
    const now = accounts.find((x) => x.id === a.id);
    if (now) {
      cells.balance.textContent = usd(now.balance_micros);
      cells.available.textContent = usd(now.available_micros);
    }
    feedback(f, `Adjusted ${a.email}.`);
  },
  field(`Amount in USD for ${a.email} (negative to debit)`, { name: "amount", inputmode: "decimal", required: true, placeholder: "5.00" }),
  field("Reason (on the ledger)", { name: "reason", required: true, maxlength: "500" }),
  h("button", { type: "submit", class: "secondary" }, "Adjust"));
}

export async function viewAdmin(after = 0) {
  const { accounts, next_after: next } = await api("GET", `/api/v1/admin/accounts?limit=${PAGE}&after=${after}`);
  const rows = accounts.map((a) => {
    const cells = { balance: h("span", {}, usd(a.balance_micros)), available: h("span", {}, usd(a.available_micros)) };
    return [String(a.id), h("span", { class: "code" }, a.email), a.verified ? "yes" : "no",
      cells.balance, cells.available, adjustForm(a, after, cells)];
  });
  render("Accounts", h("h1", {}, "Accounts"),
    table(["Id", "E-mail", "Verified", "Balance", "Available", "Adjust"], rows, { empty: "No accounts on this page." }),
    h("div", { class: "pager" },
      after ? h("button", { type: "button", class: "secondary", onclick: () => viewAdmin(0) }, "First page") : null,
      next && accounts.length === PAGE ? h("button", { type: "button", class: "secondary", onclick: () => viewAdmin(next) }, "Next page") : null));
}
