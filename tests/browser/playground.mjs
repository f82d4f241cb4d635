// Browser test of the playground: playwright-core drives Debian's Chromium against a running
// tollgate started by scripts/test, with real models (SmolLM2 chat, Qwen2.5-Coder tool calls
// and structured output, whisper-base, the Piper voice, MiniLM embeddings). A new account
// streams a multi-turn chat, retries and edits a turn, runs the "show code" snippets (curl,
// Python, Node) and gets the streamed answer back, stops a long answer and sees what was
// billed, answers a tool call and continues, gets a schema-valid JSON answer, transcribes a
// WAV file and the same words from the (fake) microphone, plays synthesized speech, compares
// embeddings and two models side by side, and finds it all in the activity list as
// "Playground"; screenshots at desktop and phone sizes.
//
// Environment: BASE, LOG (server log), BIN, DB, OUT (screenshots), CHROMIUM; PYTHON (with the
// openai package; default .venv/bin/python). Images and a thinking model's reasoning are driven
// by playground-fixtures.mjs (no such weights can be fetched here).
import { execFileSync } from "node:child_process";
import { mkdirSync } from "node:fs";
import assert from "node:assert/strict";
import { root, signUpAndIn, launch, runSnippet, playgroundPage } from "./common.mjs";

const { BASE, LOG, BIN, DB, OUT } = process.env;
for (const [k, v] of Object.entries({ BASE, LOG, BIN, DB, OUT })) assert.ok(v, `${k} is not set`);
mkdirSync(OUT, { recursive: true });
const email = `playground-${Date.now()}@example.com`;
const password = "correct horse battery";
const SMOL = "smollm2-135m-instruct", QWEN = "qwen2.5-coder-1.5b-instruct", SMALL_QWEN = "qwen2.5-coder-0.5b-instruct";
const LONG = { timeout: 180000 };

// The microphone is Chromium's fake capture device playing the fox recording once.
const browser = await launch(["--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
  `--use-file-for-fake-audio-capture=${root}/tests/fixtures/speech/fox.wav%noloop`]);
try {
  const { page, problems, shots, shot, assistant, figures, send, answered, onPhone, playgroundUsage } =
    await playgroundPage(browser, OUT, LONG.timeout);

  // A confirmed account, signed in.
  await signUpAndIn(page, BASE, LOG, email, password);
  const key = execFileSync(BIN, ["keys", "create", "--account", email, "--name", "snippets", "--db", DB], { encoding: "utf8" }).trim();

  // A streamed multi-turn chat; the snippets of the first request give its answer.
  await page.goto(`${BASE}/#/playground`);
  await page.locator("#pg-model").selectOption(SMOL);
  await page.getByLabel("System message (optional)").fill("You are a helpful assistant.");
  await page.getByLabel("Max tokens").fill("24");
  await page.getByLabel(/^Temperature/).fill("0");
  await page.getByLabel("Your message").fill("What is the capital of France?");
  await page.getByRole("button", { name: "Show code" }).click();
  const snippets = {};
  for (const kind of ["curl", "python", "node"]) snippets[kind] = await page.locator(`#pg-code-${kind}`).textContent();
  await page.getByRole("button", { name: "Send", exact: true }).click();
  const first = await answered(1);
  assert.match(first, /Paris/, "the real model's greedy answer");
  const meta1 = await figures(0).textContent();
  assert.match(meta1, /^\d+ prompt \(\d+ cached\) \+ \d+ completion tokens · \$[\d.]+ · first token after \d+ ms$/, meta1);
  for (const [kind, code] of Object.entries(snippets)) {
    assert.equal(runSnippet(kind, code, key).trim(), first, `the ${kind} snippet gives the streamed answer`);
  }
  await send("And what is the capital of Germany?");
  await answered(2);
  const prompt = async (i) => Number((await figures(i).textContent()).match(/^(\d+) prompt/)[1]);
  assert.ok(await prompt(1) > await prompt(0), "the second turn carries the first as history");
  await shot("30-playground-multi-turn");

  // Retry replaces the last answer; Edit takes a turn back into the composer.
  await page.getByRole("button", { name: "Retry" }).click();
  await answered(2);
  assert.equal(await assistant().count(), 2);
  await page.locator("#pg-log .turn.user").nth(1).getByRole("button", { name: "Edit" }).click();
  assert.equal(await page.getByLabel("Your message").inputValue(), "And what is the capital of Germany?");
  assert.equal(await assistant().count(), 1);

  // Stop mid-answer: what was billed is shown.
  await page.getByRole("button", { name: "Clear" }).click();
  await page.getByLabel("Max tokens").fill("400");
  await page.getByLabel(/^Temperature/).fill("0.8");
  await send("Write a long story about a dragon who learns to cook.");
  await assistant().first().locator(".answer-text").filter({ hasText: /\w+ \w+ \w+/ }).waitFor(LONG);
  await page.getByRole("button", { name: "Stop" }).click();
  await page.locator("#pg-stop:disabled").waitFor(LONG);
  await figures(0).filter({ hasText: /^Stopped: billed \$[\d.]+ for \d+ prompt \+ \d+ completion tokens$/ }).waitFor(LONG);
  await shot("31-playground-stopped");

  // A tool call answered by hand, then continued (Qwen2.5-Coder calls tools well).
  await page.getByRole("button", { name: "Clear" }).click();
  await page.locator("#pg-model").selectOption(QWEN);
  await page.getByLabel("System message (optional)").fill("");
  await page.getByLabel("Max tokens").fill("48");
  await page.getByLabel(/^Temperature/).fill("0");
  await page.locator("#pg-tools-panel summary").click();
  await page.locator("#pg-tools-panel").getByRole("button", { name: "Use an example" }).click();
  await send("What is the weather in Paris right now?");
  const result = page.getByLabel(/^Result of get_weather\(/);
  await result.waitFor(LONG);
  assert.match(await page.locator("#pg-log .tool-call").first().textContent(), /^get_weather\(\{.*Paris.*\}\)$/s);
  await result.fill("Sunny, 24 degrees Celsius");
  // Qwen2.5-Coder-1.5B calls the tool again under `auto` after any result (llama.cpp's server
  // renders the same 220-token prompt and gets the same call), so the continuation asks for text.
  await page.getByLabel("Tool choice").selectOption("none");
  await page.getByRole("button", { name: "Send tool results" }).click();
  const after = await answered(2);
  assert.ok(after.length > 0, `the model answered in text: ${await page.locator("#pg-log").textContent()}`);
  assert.ok(await prompt(1) > await prompt(0), "the continuation carries the call and its result");
  assert.match(await page.locator("#pg-log .turn.tool").textContent(), /Sunny, 24 degrees Celsius/);
  await page.getByLabel("Tool choice").selectOption("auto");
  await shot("32-playground-tool-call");

  // Structured output: the answer is JSON matching the schema.
  await page.getByRole("button", { name: "Clear" }).click();
  await page.locator("#pg-tools").fill("");
  await page.locator("#pg-schema-panel summary").click();
  await page.locator("#pg-schema-panel").getByRole("button", { name: "Use an example" }).click();
  await page.getByLabel("Max tokens").fill("40");
  await send("Which city and country is the Eiffel Tower in?");
  const json = JSON.parse(await answered(1));
  assert.equal(typeof json.city, "string");
  assert.equal(typeof json.country, "string");
  assert.deepEqual(Object.keys(json).sort(), ["city", "country"]);

  // Two models side by side.
  await page.getByRole("button", { name: "Clear" }).click();
  await page.locator("#pg-schema").fill("");
  await page.locator("#pg-model").selectOption(SMOL);
  await page.locator("#pg-compare-model").selectOption(SMALL_QWEN);
  await page.getByLabel("Max tokens").fill("12");
  await send("Name a fruit.");
  await answered(1);
  await page.locator("#pg-log-compare .turn.assistant .turn-meta").filter({ hasText: "completion tokens" }).waitFor();
  await shot("33-playground-compare");
  await page.locator("#pg-compare-model").selectOption("");

  // Speech to text from a recorded file; the text becomes the next message.
  await page.locator("#pg-stt-panel summary").click();
  await page.getByLabel("Audio file").setInputFiles(`${root}/tests/fixtures/speech/fox.wav`);
  await page.getByRole("button", { name: "Transcribe the file" }).click();
  await page.locator("#pg-stt-text").filter({ hasText: /fox/i }).waitFor(LONG);
  await page.getByRole("button", { name: "Use as my message" }).click();
  assert.match(await page.getByLabel("Your message").inputValue(), /fox/i);
  // The same words through the microphone, recorded in the page as WAV.
  await page.locator("#pg-stt-text").evaluate((el) => { el.textContent = ""; });
  await page.getByRole("button", { name: "Record" }).click();
  await page.getByRole("button", { name: "Stop recording" }).waitFor();
  await page.waitForTimeout(7500);
  await page.getByRole("button", { name: "Stop recording" }).click();
  await page.locator("#pg-stt-text").filter({ hasText: /fox/i }).waitFor(LONG);

  // Text to speech: the audio element plays it (it reports a duration), and it can be saved.
  await page.locator("#pg-tts-panel summary").click();
  await page.getByLabel("Text to speak").fill("Hello there, this is the playground.");
  await page.getByLabel("Format").selectOption("wav");
  await page.getByRole("button", { name: "Speak" }).click();
  await page.locator("#pg-tts-audio:not([hidden])").waitFor(LONG);
  const duration = await page.locator("#pg-tts-audio").evaluate((a) => new Promise((resolve) => {
    if (a.readyState >= 1) resolve(a.duration);
    else a.addEventListener("loadedmetadata", () => resolve(a.duration), { once: true });
  }));
  assert.ok(duration > 1 && duration < 10, `speech lasts ${duration} s`);
  assert.equal(await page.locator("#pg-tts-download").getAttribute("download"), "speech.wav");

  // Embeddings: a kitten is nearer a cat than a car is.
  await page.locator("#pg-emb-panel summary").click();
  await page.getByLabel("Texts, one per line").fill("a cat\na kitten\na car");
  await page.getByRole("button", { name: "Compare", exact: true }).click();
  const rows = page.locator("#pg-emb-out tbody tr");
  await rows.first().waitFor(LONG);
  const sims = await rows.evaluateAll((trs) => trs.map((tr) => Number(tr.lastElementChild.textContent)));
  assert.equal(sims.length, 3);
  assert.ok(sims[0] > sims[1], `cat~kitten ${sims[0]} above cat~car ${sims[1]}`);
  await shot("34-playground-panels");

  // Phone width: nothing scrolls sideways.
  await onPhone("35-playground-phone");

  // Every playground request is in the activity list, marked "Playground".
  const usage = await playgroundUsage(BASE);
  const models = new Set(usage.map((u) => u.model));
  for (const m of [SMOL, QWEN, SMALL_QWEN, "whisper-base", "piper-joe-medium", "all-MiniLM-L6-v2"]) assert.ok(models.has(m), `${m} billed on the session`);
  assert.ok(usage.every((u) => u.key_id === null && u.cost_micros >= 0));
  assert.ok(usage.some((u) => u.status === "cancelled"), "the stopped answer is billed as cancelled");

  assert.deepEqual(problems, [], "no script errors or CSP refusals");
  console.log(`playground suite: ok (${usage.length} requests billed; screenshots:\n${shots.join("\n")})`);
} finally {
  await browser.close();
}
