// Browser test of the playground's image and reasoning views, on fixture models: no weights of a
// model that reads images or thinks can be fetched here. It starts its own tollgate on
// tests/data/vision/models.toml (tiny random-weight Gemma 3, SmolVLM and Qwen2.5-VL, checked
// against transformers by tests/it/vision.rs) plus tests/browser/thinker.toml (a SCRIPTED tiny
// Qwen3 from scripts/fixtures/thinking-fixture.py: the real Qwen3 tokenizer and template, weights set so
// greedy decoding writes one fixed thinking reply), with its own SQLite ledger. A new account:
// - attaches an image on each vision model; the prompt's token count is the transformers
//   processor's for that image (reference.json), the charge is exact, and the Python "show
//   code" snippet with the same image gives the streamed answer; Edit keeps the image; the curl
//   snippet with a photo-sized image gives the streamed answer too;
// - sees the Images panel only on models that read images;
// - chats two turns with the thinker: each reasoning is folded under "Reasoning", the answer
//   is apart from it, and the reasoning tokens are billed as completion tokens; then once with
//   the Thinking switch off (`reasoning_effort: "none"`): the answer alone;
// - finds every request in the activity list as "Playground"; screenshots at desktop and phone
//   sizes; `ledger check` on the ledger.
//
// Environment: BIN (tollgate binary), OUT (screenshots), CHROMIUM; PYTHON (with the openai
// package; default .venv/bin/python).
import { execFileSync, spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { randomFillSync } from "node:crypto";
import { crc32, deflateSync } from "node:zlib";
import assert from "node:assert/strict";
import { root, signUpAndIn, launch, runSnippet, playgroundPage } from "./common.mjs";

const { BIN, OUT } = process.env;
for (const [k, v] of Object.entries({ BIN, OUT })) assert.ok(v, `${k} is not set`);
mkdirSync(OUT, { recursive: true });
const VISION = `${root}/tests/data/vision`;
const FAMILIES = [["gemma3", "landscape"], ["smolvlm", "portrait"], ["qwen25vl", "square"]];
const THINKER = "thinker";
// Both catalogues price every model at 0.5 / 1.5 USD per 1M tokens; cached tokens cost a tenth
// of the input price, with one rounding up (docs/reference/costs.md).
const cost = (prompt, cached, completion) => Math.ceil(((prompt - cached) * 500000 + cached * 50000 + completion * 1500000) / 1e6);
const usd = (micros) => `$${(micros / 1e6).toFixed(micros % 10000 === 0 ? 2 : 6)}`;
const LONG = { timeout: 120000 };

// A PNG of random pixels, `w` x `h` RGB: it does not compress, so its data URL is as long as a
// photo's (the deflate stream's stored blocks hold the bytes as they are).
function noisePng(w, h) {
  const chunk = (type, data) => {
    const out = Buffer.alloc(12 + data.length);
    out.writeUInt32BE(data.length, 0);
    out.write(type, 4, "latin1");
    data.copy(out, 8);
    out.writeUInt32BE(crc32(out.subarray(4, 8 + data.length)), 8 + data.length);
    return out;
  };
  const header = Buffer.alloc(13);
  header.writeUInt32BE(w, 0);
  header.writeUInt32BE(h, 4);
  header.set([8, 2, 0, 0, 0], 8); // 8 bits per channel, RGB, deflate, no filter choice, no interlace
  const rows = Buffer.alloc(h * (1 + 3 * w));
  for (let y = 0; y < h; y++) randomFillSync(rows, y * (1 + 3 * w) + 1, 3 * w); // filter byte 0
  return Buffer.concat([Buffer.from([137, 80, 78, 71, 13, 10, 26, 10]), chunk("IHDR", header),
    chunk("IDAT", deflateSync(rows)), chunk("IEND", Buffer.alloc(0))]);
}

const freePort = () => new Promise((resolve) => {
  const s = createServer().listen(0, "127.0.0.1", () => { const { port } = s.address(); s.close(() => resolve(port)); });
});

// The weights folder: the vision fixtures linked in, the thinker written; the catalogue.
const work = mkdtempSync(`${tmpdir()}/tollgate-playground-fixtures-`);
const weights = `${work}/weights`;
mkdirSync(weights);
for (const [family] of FAMILIES) symlinkSync(`${VISION}/${family}`, `${weights}/${family}`);
execFileSync("python3", [`${root}/scripts/fixtures/thinking-fixture.py`, `${weights}/${THINKER}`], { stdio: "inherit" });
const catalogue = `${work}/models.toml`;
writeFileSync(catalogue, readFileSync(`${VISION}/models.toml`, "utf8") + "\n" + readFileSync(`${root}/tests/browser/thinker.toml`, "utf8"));

const port = await freePort();
const BASE = `http://127.0.0.1:${port}`, LOG = `${work}/server.log`, DB = `${work}/ledger.db`;
const server = spawn(BIN, ["serve", "--bind", `127.0.0.1:${port}`, "--db", DB, "--models", catalogue, "--weights", weights,
  "--load", `${FAMILIES.map(([f]) => f).join(",")},text-only,${THINKER}`, "--threads", "1", "--insecure-cookies",
  "--public-url", BASE], { cwd: root, stdio: ["ignore", openSync(LOG, "w"), openSync(LOG, "a")] });
const exited = () => server.exitCode != null || server.signalCode != null;
let browser;
try {
  let up = false;
  for (let i = 0; i < 240 && !up && !exited(); i++) {
    up = await fetch(`${BASE}/health`).then((r) => r.ok, () => false);
    if (!up) await new Promise((r) => setTimeout(r, 500));
  }
  assert.ok(up, `the fixture server did not start:\n${readFileSync(LOG, "utf8")}`);
  browser = await launch();
  const { page, problems, shots, shot, figures, send, answered, onPhone, playgroundUsage } =
    await playgroundPage(browser, OUT, LONG.timeout);
  const numbers = async (i) => {
    const m = (await figures(i).textContent()).match(/^(\d+) prompt \((\d+) cached\) \+ (\d+) completion tokens · (\$[\d.]+) · /);
    assert.ok(m, await figures(i).textContent());
    return { prompt: Number(m[1]), cached: Number(m[2]), completion: Number(m[3]), shown: m[4] };
  };
  const imagePanel = page.locator("#pg-image-panel");

  const email = `fixtures-${Date.now()}@example.com`;
  await signUpAndIn(page, BASE, LOG, email, "correct horse battery");
  const key = execFileSync(BIN, ["keys", "create", "--account", email, "--name", "snippets", "--db", DB], { encoding: "utf8" }).trim();
  await page.goto(`${BASE}/#/playground`);
  await page.getByLabel("Max tokens").fill("5");
  await page.getByLabel(/^Temperature/).fill("0");

  // An image on each vision model: the reference prompt's tokens, image tokens included.
  for (const [family, name] of FAMILIES) {
    const ref = JSON.parse(readFileSync(`${VISION}/${family}/reference.json`, "utf8"));
    const item = ref.images.find((i) => i.name === name);
    await page.locator("#pg-model").selectOption(family);
    await imagePanel.waitFor({ state: "visible" });
    if (!(await imagePanel.evaluate((d) => d.open))) await imagePanel.locator("summary").click();
    await page.getByLabel("Attach images to the next message").setInputFiles(`${root}/tests/data/vision/images/${name}.png`);
    await page.getByLabel("Your message").fill(ref.prompt.messages[0].content[1].text);
    await page.getByRole("button", { name: "Show code" }).click();
    const python = await page.locator("#pg-code-python").filter({ hasText: `"model": "${family}"` })
      .filter({ hasText: "data:image/png;base64," }).textContent();
    await page.getByRole("button", { name: "Show code" }).click();
    await page.getByRole("button", { name: "Send", exact: true }).click();
    const answer = await answered(1);
    const turn = page.locator("#pg-log .turn.user").first();
    assert.match(await turn.textContent(), /\[1 image\]/);
    assert.deepEqual(await turn.getByRole("img", { name: "Attached image 1" }).evaluate(async (i) => { await i.decode(); return [i.naturalWidth, i.naturalHeight]; }),
      [item.width, item.height], "the attached image is shown");
    const n = await numbers(0);
    assert.equal(n.prompt, item.n_tokens, `${family}: the prompt with its ${item.n_image_tokens} image tokens`);
    assert.equal(n.shown, usd(cost(n.prompt, n.cached, n.completion)), `${family}: the charge`);
    assert.equal(runSnippet("python", python, key).trim(), answer, `${family}: the Python snippet gives the streamed answer`);
    if (family === "gemma3") {
      await shot("40-playground-image");
      // Edit takes the turn back with its image; sent again, it is the same request.
      await turn.getByRole("button", { name: "Edit" }).click();
      assert.equal(await page.getByLabel("Your message").inputValue(), ref.prompt.messages[0].content[1].text);
      assert.equal(await page.getByLabel("Attach images to the next message").evaluate((i) => i.files.length), 1);
      await page.getByRole("button", { name: "Send", exact: true }).click();
      assert.equal(await answered(1), answer, "the edited turn carries the same image");
      assert.equal((await numbers(0)).prompt, item.n_tokens);
    }
    await page.getByRole("button", { name: "Clear" }).click();
  }
  // A photo-sized image: the curl snippet (its body longer than one command-line argument may
  // be) still gives the streamed answer.
  const photo = `${work}/photo.png`;
  writeFileSync(photo, noisePng(320, 240));
  await page.locator("#pg-model").selectOption("gemma3");
  await page.getByLabel("Attach images to the next message").setInputFiles(photo);
  await page.getByLabel("Your message").fill("Describe this.");
  await page.getByRole("button", { name: "Show code" }).click();
  const curl = await page.locator("#pg-code-curl").filter({ hasText: '"model":"gemma3"' })
    .filter({ hasText: "data:image/png;base64," }).textContent();
  assert.ok(curl.length > 131072, `the curl snippet is ${curl.length} characters`);
  await page.getByRole("button", { name: "Show code" }).click();
  await page.getByRole("button", { name: "Send", exact: true }).click();
  const seen = await answered(1);
  assert.equal(runSnippet("curl", curl, key).trim(), seen, "the curl snippet with a photo gives the streamed answer");
  await page.getByRole("button", { name: "Clear" }).click();

  await page.locator("#pg-model").selectOption("text-only");
  await imagePanel.waitFor({ state: "hidden" });
  assert.equal(await page.getByLabel("Thinking").isVisible(), false, "only thinking models have the switch");

  // The thinker: two turns, each with its reasoning folded apart from the answer.
  await page.locator("#pg-model").selectOption(THINKER);
  await page.getByLabel("Max tokens").fill("64");
  for (const [i, question] of ["What is the capital of France?", "Are you sure?"].entries()) {
    await send(question);
    assert.equal(await answered(i + 1), "Paris!");
    const n = await numbers(i);
    // <think>, 10 reasoning tokens, </think>, "\n\n", "Paris", "!" and the end token.
    assert.equal(n.completion, 16, "the reasoning is billed as completion tokens");
    assert.equal(n.shown, usd(cost(n.prompt, n.cached, n.completion)));
  }
  const folds = page.locator("#pg-log .turn.assistant details.reasoning");
  assert.equal(await folds.count(), 2, "each answer keeps its reasoning");
  for (let i = 0; i < 2; i++) {
    const fold = folds.nth(i);
    assert.equal(await fold.evaluate((d) => d.open), false, "folded");
    assert.equal(await fold.locator(".reasoning-text").isVisible(), false);
    await fold.locator("summary").click();
    assert.equal((await fold.locator(".reasoning-text").textContent()).trim(), "The question names France; its capital is Paris.");
  }
  assert.ok((await numbers(1)).prompt > (await numbers(0)).prompt, "the second turn carries the first");
  await shot("41-playground-reasoning");

  // Thinking off: the template closes the thinking in the prompt; the answer comes at once, and
  // the "show code" request carries the switch.
  await page.getByRole("button", { name: "Clear" }).click();
  await page.getByLabel("Thinking").selectOption("none");
  await page.getByLabel("Your message").fill("What is the capital of France?");
  await page.getByRole("button", { name: "Show code" }).click();
  const python = await page.locator("#pg-code-python").filter({ hasText: '"reasoning_effort": "none"' }).textContent();
  await page.getByRole("button", { name: "Show code" }).click();
  await page.getByRole("button", { name: "Send", exact: true }).click();
  assert.equal(await answered(1), "Paris!");
  assert.equal((await numbers(0)).completion, 3, '"Paris", "!" and the end token: no thinking');
  assert.equal(await folds.count(), 0, "no reasoning to fold");
  assert.equal(runSnippet("python", python, key).trim(), "Paris!");
  await page.getByLabel("Thinking").selectOption("");
  await onPhone("42-playground-reasoning-phone");

  // Every request is billed on the session, at the shown price, and listed as "Playground".
  const usage = await playgroundUsage(BASE);
  assert.deepEqual([...new Set(usage.map((u) => u.model))].sort(), [...FAMILIES.map(([f]) => f), THINKER].sort());
  assert.equal(usage.length, FAMILIES.length + 5);
  for (const u of usage) {
    assert.equal(u.key_id, null);
    assert.equal(u.cost_micros, cost(u.prompt_tokens, u.cached_tokens || 0, u.completion_tokens), JSON.stringify(u));
  }

  assert.deepEqual(problems, [], "no script errors or CSP refusals");
  console.log(`playground fixtures suite: ok (${usage.length} requests billed; screenshots:\n${shots.join("\n")})`);
} finally {
  if (browser) await browser.close();
  server.kill();
  await new Promise((r) => exited() ? r() : server.once("exit", r));
}
execFileSync(BIN, ["ledger", "check", "--db", DB], { stdio: "inherit" });
rmSync(work, { recursive: true, force: true });
