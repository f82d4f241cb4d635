// Signing up, confirming the address, signing in, resetting a password, and the account page
// (password, sessions, deletion).
import {
  h, state, hooks, api, render, field, form, feedback, actionButton, setFlash, navigate, refreshMe, requireMe, when, usd,
} from "./core.js";

const resend = (email) => api("POST", "/api/v1/auth/resend-verification", { email });

// A "Resend the link" button for `email`, with its answer beside it.
function resendButton(email, label = "Resend the link") {
  return actionButton(label, { class: "secondary" }, async (b) => {
    await resend(email);
    feedback(b, `Sent again: if ${email} has an unconfirmed account, a new link is on its way (an earlier link keeps working until it expires).`);
  });
}

function viewCheckEmail(email) {
  render("Check your e-mail", h("h1", {}, "Check your e-mail"),
    h("p", {}, "We sent a link to ", h("strong", { class: "code" }, email), " to confirm the address. ",
      "Open it within 24 hours; your account can sign in once the address is confirmed."),
    h("h2", {}, "Nothing arrived?"),
    h("ul", {},
      h("li", {}, "Look in your spam or junk folder; the message comes from this server."),
      h("li", {}, "On a self-hosted server without e-mail, the link is written to the server log instead."),
      h("li", {}, "Still nothing after a few minutes? Ask for a new link:")),
    resendButton(email),
    h("p", {}, "Confirmed? ", h("a", { href: "#/signin" }, "Sign in")));
}

export function viewSignup() {
  const f = form({}, async (d) => {
    const email = d.get("email");
    await api("POST", "/api/v1/auth/signup", { email, password: d.get("password") });
    viewCheckEmail(email);
  },
  field("E-mail", { name: "email", type: "email", autocomplete: "email", required: true }),
  field("Password (at least 8 characters)", { name: "password", type: "password", autocomplete: "new-password", minlength: "8", required: true }),
  h("button", { type: "submit" }, "Create account"));
  const starter = state.providers && state.providers.starter_micros > 0
    ? h("p", { class: "muted" }, `Confirm your address and the account starts with ${usd(state.providers.starter_micros)} of credit.`) : null;
  render("Sign up", h("h1", {}, "Sign up"), starter, f,
    h("p", {}, "Already have an account? ", h("a", { href: "#/signin" }, "Sign in")));
}

function signinForm() {
  const f = form({}, async (d) => {
    const email = d.get("email");
    try {
      await api("POST", "/api/v1/auth/signin", { email, password: d.get("password") });
    } catch (e) {
      if (e.code !== "email_not_verified") throw e;
      feedback(f, [e.message, " ", resendButton(email, "Resend the confirmation link")], true);
      return;
    }
    await refreshMe();
    navigate(await hooks.landing());
  },
  field("E-mail", { name: "email", type: "email", autocomplete: "email", required: true }),
  field("Password", { name: "password", type: "password", autocomplete: "current-password", required: true }),
  h("button", { type: "submit" }, "Sign in"));
  return f;
}

export function viewSignin() {
  const reset = form({ class: "small" }, async (d, f) => {
    await api("POST", "/api/v1/auth/password-reset", { email: d.get("email") });
    feedback(f, "If the address has an account, a reset link is on its way.");
  }, field("E-mail", { name: "email", type: "email", autocomplete: "email", required: true }),
  h("button", { type: "submit", class: "secondary" }, "Send a reset link"));
  const again = form({ class: "small" }, async (d, f) => {
    await resend(d.get("email"));
    feedback(f, "If the address has an unconfirmed account, a new confirmation link is on its way.");
  }, field("E-mail", { name: "email", type: "email", autocomplete: "email", required: true }),
  h("button", { type: "submit", class: "secondary" }, "Resend it"));
  const p = state.providers;
  const sso = p && p.oidc ? h("p", {}, h("a", { class: "button", href: p.oidc.start }, `Sign in with ${p.oidc.label}`)) : null;
  render("Sign in", h("h1", {}, "Sign in"), sso, signinForm(),
    h("p", {}, "No account yet? ", h("a", { href: "#/signup" }, "Sign up")),
    h("details", {}, h("summary", {}, "Forgot your password?"), reset),
    h("details", {}, h("summary", {}, "Didn't get the confirmation e-mail? Resend it"), again));
}

// The e-mailed reset link (/reset?token=...): choose a new password, then sign in.
export function viewReset(token) {
  const f = form({}, async (d) => {
    await api("POST", "/api/v1/auth/password-reset/confirm", { token, password: d.get("password") });
    setFlash("Password changed; sign in with the new one.");
    history.replaceState(null, "", "/#/signin");
    viewSignin();
  }, field("New password (at least 8 characters)", { name: "password", type: "password", autocomplete: "new-password", minlength: "8", required: true }),
  h("button", { type: "submit" }, "Set password"));
  render("Choose a new password", h("h1", {}, "Choose a new password"), f);
}

function passwordForm(me) {
  const f = form({}, async (d) => {
    const r = await api("POST", "/api/v1/account/password", {
      current_password: me.has_password ? d.get("current_password") : null,
      new_password: d.get("new_password"),
    });
    f.reset();
    const n = r.other_sessions_ended || 0;
    feedback(f, `Password changed. ${n === 1 ? "1 other session was" : `${n} other sessions were`} signed out; this one stays signed in.`);
  },
  me.has_password
    ? field("Current password", { name: "current_password", type: "password", autocomplete: "current-password", required: true })
    : h("p", { class: "muted" }, "You sign in through single sign-on; set a password to sign in with your e-mail address too."),
  field("New password (at least 8 characters)", { name: "new_password", type: "password", autocomplete: "new-password", minlength: "8", required: true }),
  h("button", { type: "submit" }, me.has_password ? "Change password" : "Set password"));
  return f;
}

function signOutEverywhere() {
  return actionButton("Sign out everywhere", { class: "secondary" }, async () => {
    await api("POST", "/api/v1/auth/signout-everywhere", {});
    await refreshMe();
    setFlash("Signed out everywhere: every session of this account has ended, this one too. Sign in again.");
    navigate("#/signin");
  });
}

function viewGoodbye(kept) {
  render("Account deleted", h("h1", {}, "Your account is deleted"),
    h("p", {}, "Your e-mail address, password, API keys, sessions and sign-in identities are gone. Thank you for using tollgate."),
    kept ? h("p", { class: "muted" }, kept) : null,
    h("p", {}, h("a", { href: "#/" }, "Back to the start")));
}

function deleteSection(me) {
  const f = form({}, async (d) => {
    const r = await api("DELETE", "/api/v1/account", { confirm_email: d.get("confirm_email") });
    state.me = null;
    await refreshMe();
    viewGoodbye(r.kept);
  },
  field("Type your e-mail address to confirm", { name: "confirm_email", type: "email", autocomplete: "off", required: true }),
  h("button", { type: "submit", class: "danger" }, "Delete my account"));
  return h("section", { class: "danger-zone", "aria-labelledby": "delete-h" },
    h("h2", { id: "delete-h" }, "Delete your account"),
    h("p", {}, "Deleting removes your e-mail address, password, API keys (they stop working at once), sessions and single sign-on identities."),
    h("p", {}, "The law requires us to keep the accounting records: ledger entries, usage records and card top-ups stay, ",
      "under a pseudonymous account number no longer linked to you."),
    h("p", { class: "warn" }, `Your remaining balance of ${usd(me.balance_micros)} is forfeited: it is not refunded and cannot be moved to another account.`),
    f);
}

export async function viewAccount() {
  const me = await requireMe();
  render("Account", h("h1", {}, "Account"),
    h("dl", { class: "facts" },
      h("dt", {}, "E-mail"), h("dd", { class: "code" }, me.email),
      h("dt", {}, "Address confirmed"), h("dd", {}, me.verified ? "yes" : "no"),
      h("dt", {}, "Created"), h("dd", {}, when(me.created_at)),
      h("dt", {}, "Balance"), h("dd", {}, usd(me.balance_micros), " ", h("a", { href: "#/balance" }, "Balance and usage")),
      me.admin ? [h("dt", {}, "Role"), h("dd", {}, "administrator")] : null),
    h("h2", {}, me.has_password ? "Change your password" : "Set a password"), passwordForm(me),
    h("h2", {}, "Sessions"),
    h("p", {}, "Signed in on a computer you no longer use? End every session of this account, this one included."),
    signOutEverywhere(),
    deleteSection(me));
}
