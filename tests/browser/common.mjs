// Helpers shared by the playground's browser suites (playground.mjs on the real models,
// playground-fixtures.mjs on the fixture models): the e-mailed link read from a server log,
// a confirmed account signed in, Chromium, and the "show code" snippets run with a key.
import { chromium } from "playwright-core";
import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync, rmSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import assert from "node:assert/strict";

export const root = path.resolve(path.dirname(new URL(import.meta.url).pathname), "../..");
const PYTHON = process.env.PYTHON || `${root}/.venv/bin/python`;

// The last e-mailed link of `kind` ("verify") in the server log `log` (no SMTP relay in tests).
export async function linkFromLog(log, kind) {
  const re = new RegExp(`(https?:\\/\\/\\S+\\/${kind}\\?token=[0-9a-f]{64})`, "g");
  for (let i = 0; i < 50; i++) {
    const m = [...readFileSync(log, "utf8").matchAll(re)].filter((x) => !x[1].includes("undefined"));
    if (m.length) return m[m.length - 1][1];
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`no ${kind} link in the server log`);
}

// Signs up `email` on the server at `base` (log file `log`), confirms it and signs in.
export async function signUpAndIn(page, base, log, email, password) {
  await page.goto(`${base}/#/signup`);
  await page.getByLabel("E-mail").fill(email);
  await page.getByLabel("Password (at least 8 characters)").fill(password);
  await page.getByRole("button", { name: "Create account" }).click();
  await page.getByRole("heading", { name: "Check your e-mail" }).waitFor();
  await page.goto(await linkFromLog(log, "verify"));
  await page.getByText("Your address is confirmed").waitFor();
  await page.goto(`${base}/#/signin`);
  await page.getByLabel("E-mail").first().fill(email);
  await page.getByLabel("Password", { exact: true }).fill(password);
  await page.getByRole("button", { name: "Sign in", exact: true }).click();
  await page.getByRole("heading", { name: "API keys" }).waitFor();
}

// Debian's Chromium, headless; `args` are added to the defaults.
export function launch(args = []) {
  return chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--headless", "--no-sandbox", ...args],
  });
}

// Collects `page`'s script errors and Content-Security-Policy refusals into `problems`.
export function watchProblems(page, problems) {
  page.on("pageerror", (e) => problems.push(`${page.url()}: ${e.message}`));
  page.on("console", (m) => {
    if (m.type() === "error" && /Content Security Policy|Refused to/.test(m.text())) problems.push(`${page.url()}: ${m.text()}`);
  });
  return page;
}

// A 1200x900 page of `browser` with the playground's locators: `problems` collects script errors
// and CSP refusals, `shot(name)` saves a full-page screenshot under `out`, `answered(n)` waits
// for the n-th answer (the Stop button is enabled from the click that sends until every side
// has answered) and returns its text, `onPhone(name)` checks that nothing scrolls sideways at
// 390 px and saves screenshot `name` there, `playgroundUsage(base)` returns the account's
// playground usage rows once the activity list shows them as "Playground".
export async function playgroundPage(browser, out, timeout) {
  const page = await browser.newPage({ viewport: { width: 1200, height: 900 } });
  const problems = [], shots = [];
  watchProblems(page, problems);
  const shot = async (name) => { const p = `${out}/${name}.png`; await page.screenshot({ path: p, fullPage: true }); shots.push(p); };
  const assistant = () => page.locator("#pg-log .turn.assistant");
  const figures = (i) => assistant().nth(i).locator(".turn-meta");
  const send = async (text) => {
    await page.getByLabel("Your message").fill(text);
    await page.getByRole("button", { name: "Send", exact: true }).click();
  };
  const answered = async (n) => {
    await page.locator("#pg-stop:disabled").waitFor({ timeout });
    // Send disables Stop too while it reads attached images, before the turn is drawn.
    await figures(n - 1).filter({ hasText: "completion tokens" }).waitFor({ timeout });
    return (await assistant().nth(n - 1).locator(".answer-text").textContent()).trim();
  };
  const onPhone = async (name) => {
    await page.setViewportSize({ width: 390, height: 844 });
    await page.waitForTimeout(150);
    const [scroll, inner] = await page.evaluate(() => [document.documentElement.scrollWidth, window.innerWidth]);
    assert.ok(scroll <= inner, `the playground is ${scroll} px wide on a 390 px phone`);
    await shot(name);
    await page.setViewportSize({ width: 1200, height: 900 });
  };
  const playgroundUsage = async (base) => {
    const usage = await page.evaluate(async () => (await (await fetch("/api/v1/usage?key_id=playground&limit=50")).json()).data.usage);
    await page.goto(`${base}/#/balance`);
    await page.locator(".requests td").filter({ hasText: "Playground" }).first().waitFor();
    return usage;
  };
  return { page, problems, shots, shot, assistant, figures, send, answered, onPhone, playgroundUsage };
}

// Runs one "show code" snippet (`kind`: curl, python or node) with `key` and returns the answer
// it printed. Each runs from a file, as a user would paste it: an attached image makes the code
// longer than one command-line argument may be.
export function runSnippet(kind, code, key) {
  const env = { ...process.env, TOLLGATE_API_KEY: key };
  // The Node snippet imports "openai": it runs where tests/node's packages are.
  const dir = kind === "node" ? `${root}/tests/node` : mkdtempSync(`${tmpdir()}/tollgate-snippet-`);
  const file = `${dir}/snippet-${process.pid}.${{ curl: "sh", python: "py", node: "mjs" }[kind]}`;
  writeFileSync(file, code);
  try {
    if (kind === "curl") return JSON.parse(execFileSync("bash", [file], { env, encoding: "utf8" })).choices[0].message.content;
    const program = kind === "python" ? PYTHON : "node";
    return execFileSync(program, [file], { env, encoding: "utf8", cwd: dir }).replace(/\n$/, "");
  } finally {
    rmSync(kind === "node" ? file : dir, { recursive: true, force: true });
  }
}
