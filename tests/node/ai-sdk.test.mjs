// The Vercel AI SDK's OpenAI provider (`@ai-sdk/openai`) against a running tollgate (real
// SmolLM2). Its default model, `openai(model)`, calls the Responses API (`POST /v1/responses`);
// `generateText` reads the whole response and `streamText` its typed events.
// Run by scripts/test with TOLLGATE_BASE_URL and TOLLGATE_API_KEY: `node --test tests/node`.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createOpenAI } from "@ai-sdk/openai";
import { generateText, streamText } from "ai";

const openai = createOpenAI({
  baseURL: process.env.TOLLGATE_BASE_URL,
  apiKey: process.env.TOLLGATE_API_KEY,
});
const model = openai("smollm2-135m-instruct");
const args = {
  model,
  system: "You are a helpful assistant.",
  prompt: "What is the capital of France?",
  maxOutputTokens: 30,
  temperature: 0,
  maxRetries: 0,
};

test("generateText through the Responses API", async () => {
  const r = await generateText(args);
  assert.match(r.text, /Paris/);
  assert.equal(r.finishReason, "stop");
  assert.ok(r.usage.inputTokens > 0 && r.usage.outputTokens > 0);
  assert.match(r.response.id, /^resp_/);
});

test("streamText through the Responses API gives the same text", async () => {
  const whole = await generateText(args);
  const r = streamText(args);
  let text = "";
  for await (const delta of r.textStream) text += delta;
  assert.equal(text, whole.text);
  assert.equal(await r.finishReason, "stop");
  const usage = await r.usage;
  assert.equal(usage.outputTokens, whole.usage.outputTokens);
});

test("a second turn sends the first answer as an item_reference and is served", async () => {
  const sent = [];
  const recording = createOpenAI({
    baseURL: process.env.TOLLGATE_BASE_URL,
    apiKey: process.env.TOLLGATE_API_KEY,
    fetch: async (url, init) => {
      sent.push(JSON.parse(init.body));
      return fetch(url, init);
    },
  });
  const m = recording("smollm2-135m-instruct");
  const messages = [{ role: "user", content: "What is the capital of France?" }];
  const first = await generateText({ model: m, messages, maxOutputTokens: 20, temperature: 0, maxRetries: 0 });
  messages.push(...first.response.messages, { role: "user", content: "And of Italy?" });
  const second = await generateText({ model: m, messages, maxOutputTokens: 20, temperature: 0, maxRetries: 0 });
  assert.ok(second.text.length > 0);
  const refs = sent[1].input.filter((i) => i.type === "item_reference");
  assert.equal(refs.length, 1, JSON.stringify(sent[1].input));
  assert.match(refs[0].id, /^msg_/);
  assert.ok(second.usage.inputTokens > first.usage.inputTokens + first.usage.outputTokens);
});
