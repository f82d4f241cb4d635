// The official `openai` Node SDK's agent loop on Qwen2.5-Coder-1.5B under `tool_choice: "auto"`
// at the default temperature: the model calls the tool, the loop runs it and sends the result
// back, the model answers in text. Not a `*.test.mjs` file: tests/python/test_qwen.py runs it
// against its own Qwen server (TOLLGATE_BASE_URL, TOLLGATE_API_KEY, TOLLGATE_MODEL).
import assert from "node:assert/strict";
import OpenAI from "openai";

const client = new OpenAI({
  baseURL: process.env.TOLLGATE_BASE_URL,
  apiKey: process.env.TOLLGATE_API_KEY,
  maxRetries: 0,
  timeout: 600_000,
});
const model = process.env.TOLLGATE_MODEL;
const tools = [{
  type: "function",
  function: {
    name: "get_weather",
    description: "Get the current weather in a location.",
    parameters: { type: "object", properties: { location: { type: "string" } }, required: ["location"] },
  },
}];
const weather = ({ location }) => `18 C and sunny in ${location}`;

const messages = [{ role: "user", content: "What's the weather in Paris?" }];
let calls = 0;
for (let turn = 0; turn < 3; turn++) {
  const r = await client.chat.completions.create({ model, messages, tools, max_tokens: 40, seed: turn });
  const msg = r.choices[0].message;
  messages.push(msg);
  if (!msg.tool_calls?.length) {
    assert.equal(typeof msg.content, "string");
    assert.ok(calls > 0, "answered before calling the tool");
    console.log(JSON.stringify({ calls, answer: msg.content }));
    process.exit(0);
  }
  assert.equal(r.choices[0].finish_reason, "tool_calls");
  for (const call of msg.tool_calls) {
    assert.equal(call.function.name, "get_weather");
    calls += 1;
    messages.push({ role: "tool", tool_call_id: call.id, content: weather(JSON.parse(call.function.arguments)) });
  }
  // After the result, answer in text (the SDK loop's last turn), greedily: at the default
  // temperature the model now and then ends its turn at once (an empty answer, seen once in
  // about ten runs), which says nothing about the loop.
  if (calls > 0) {
    const a = await client.chat.completions.create({
      model, messages, tools, tool_choice: "none", max_tokens: 24, temperature: 0,
    });
    assert.ok(a.choices[0].message.content, JSON.stringify(a));
    console.log(JSON.stringify({ calls, answer: a.choices[0].message.content }));
    process.exit(0);
  }
}
assert.fail("the loop never ended");
