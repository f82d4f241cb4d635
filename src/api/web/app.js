// tollgate dashboard: a small single-page app over /api/v1 (session cookie) and /v1, in ES
// modules with no framework and no build step. This entry routes `#/page/arg?query` to the
// views, keeps the navigation in step with the session and handles a card payment's return.
import { $, h, state, hooks, status, render, setFlash, navigate, refreshMe, api, usd } from "./core.js";
import { viewModels, viewModel } from "./models.js";
import { viewSignup, viewSignin, viewReset, viewAccount } from "./account.js";
import { viewKeys } from "./keys.js";
import { viewBalance } from "./activity.js";
import { viewPlayground } from "./playground.js";
import { viewAdmin } from "./admin.js";

const NEEDS_AUTH = new Set(["keys", "balance", "playground", "account", "admin"]);

function viewHome() {
  const me = state.me;
  render(null, h("h1", {}, "tollgate"),
    h("p", {}, "Open-weight language models behind an OpenAI-compatible API, paid from a prepaid balance."),
    h("ul", { class: "links" },
      me ? h("li", {}, h("a", { href: "#/keys" }, "Manage your API keys")) : h("li", {}, h("a", { href: "#/signup" }, "Create an account")),
      me ? h("li", {}, h("a", { href: "#/balance" }, "See your balance and usage")) : h("li", {}, h("a", { href: "#/signin" }, "Sign in")),
      h("li", {}, h("a", { href: "#/models" }, "See models and prices")),
      h("li", {}, h("a", { href: "/reference" }, "Read the API reference"))));
}

// `#/models/qwen3-4b?x=1` -> {page: "models", arg: "qwen3-4b", query}.
function parseHash() {
  const raw = location.hash.replace(/^#\/?/, "");
  const [path, qs] = raw.split("?");
  const [page, ...rest] = path.split("/");
  return { page: page || "", arg: rest.length ? decodeURIComponent(rest.join("/")) : null, query: new URLSearchParams(qs || "") };
}

function markCurrent(page) {
  for (const a of document.querySelectorAll("#site-nav a")) {
    const target = a.getAttribute("href").replace(/^#\/?/, "").split(/[/?]/)[0];
    if (a.getAttribute("href").startsWith("#") && target === page) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
}

async function route() {
  status("");
  closeMenu();
  const params = new URLSearchParams(location.search);
  if (location.pathname === "/reset" && params.get("token")) return viewReset(params.get("token"));
  const { page, arg, query } = parseHash();
  markCurrent(page);
  if (NEEDS_AUTH.has(page) && !state.me) {
    state.returnTo = location.hash;
    setFlash("Sign in first.");
    return viewSignin();
  }
  try {
    switch (page) {
      case "models": return await (arg ? viewModel(arg) : viewModels(query));
      case "signup": return viewSignup();
      case "signin": return viewSignin();
      case "keys": return await viewKeys();
      case "balance": return await viewBalance(query);
      case "playground": return await viewPlayground();
      case "account": return await viewAccount();
      case "admin": return await viewAdmin();
      default: return viewHome();
    }
  } catch (e) {
    if (e.sessionEnded) return undefined;
    render("Error", h("h1", {}, "This page could not be loaded"), h("p", { role: "alert", class: "warn" }, e.message),
      h("p", {}, h("a", { href: "#/" }, "Back to the start")));
  }
  return undefined;
}

// A 401 from any call while signed in: the session ended elsewhere (signed out everywhere,
// expired). Back to sign-in, then on to the page the user was on.
function sessionEnded() {
  if (!state.me) return;
  state.me = null;
  refreshMe();
  if (NEEDS_AUTH.has(parseHash().page)) state.returnTo = location.hash;
  setFlash("Your session ended; sign in again.", true);
  navigate("#/signin");
}

// Where a fresh sign-in goes: the page that sent the user to sign in, else the keys page for
// an account without keys (the first thing to do), else the balance.
async function landing() {
  const back = state.returnTo;
  state.returnTo = null;
  if (back && NEEDS_AUTH.has(back.replace(/^#\/?/, "").split(/[/?]/)[0])) return back;
  const { keys } = await api("GET", "/api/v1/keys");
  return keys.length ? "#/balance" : "#/keys";
}

// The phone layout folds the navigation behind a "Menu" button.
function closeMenu() {
  $("header").classList.remove("open");
  $("#menu-toggle").setAttribute("aria-expanded", "false");
}

function setupNav() {
  $("#menu-toggle").addEventListener("click", () => {
    const open = $("header").classList.toggle("open");
    $("#menu-toggle").setAttribute("aria-expanded", String(open));
  });
  $("#signout").addEventListener("click", async () => {
    try { await api("POST", "/api/v1/auth/signout", {}, { quiet: true }); } catch (e) { /* already out */ }
    await refreshMe();
    setFlash("Signed out.");
    navigate("#/");
  });
}

// After Stripe Checkout returns: poll the top-up until its webhook has credited it (2 s apart,
// for up to 2 minutes), then say so and show the balance.
async function awaitTopup(checkoutId) {
  status("Payment received; waiting for the provider to confirm it…");
  for (let i = 0; i < 60; i++) {
    try {
      const t = await api("GET", `/api/v1/topups/${encodeURIComponent(checkoutId)}`);
      if (t.state === "completed") {
        if (location.hash.startsWith("#/balance")) await route();
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

async function start() {
  hooks.route = route;
  hooks.unauthorized = sessionEnded;
  hooks.landing = landing;
  setupNav();
  window.addEventListener("hashchange", route);
  await refreshMe();
  state.providers = await api("GET", "/api/v1/auth/providers").catch(() => null);
  const params = new URLSearchParams(location.search);
  const checkout = params.get("topup") === "success" && params.get("checkout_id");
  const cancelled = params.get("topup") === "cancelled";
  if (params.has("topup")) history.replaceState(null, "", checkout ? "/#/balance" : "/" + location.hash);
  await route();
  if (checkout) awaitTopup(checkout);
  else if (cancelled) status("Top-up cancelled; nothing was charged.");
}

start();
