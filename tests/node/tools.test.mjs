// The official `openai` Node SDK against a running tollgate (real SmolLM2): a forced tool call,
// the tool result appended as the SDK docs show, and the plain multi-turn loop.
// Run by scripts/test with TOLLGATE_BASE_URL and TOLLGATE_API_KEY: `node --test tests/node`.
import { test } from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";

const client = new OpenAI({
  baseURL: process.env.TOLLGATE_BASE_URL,
  apiKey: process.env.TOLLGATE_API_KEY,
  maxRetries: 0,
});
const model = "smollm2-135m-instruct";
const tools = [
  {
    type: "function",
    function: {
      name: "get_weather",
      description: "The current weather in a city.",
      parameters: {
        type: "object",
        properties: { location: { type: "string" } },
        required: ["location"],
      },
    },
  },
];

test("tool call, then the tool result turn", async () => {
  const messages = [{ role: "user", content: "What is the weather in Paris?" }];
  const r = await client.chat.completions.create({
    model, messages, tools, tool_choice: "required", max_tokens: 60, temperature: 0,
  });
  const choice = r.choices[0];
  assert.equal(choice.finish_reason, "tool_calls");
  const call = choice.message.tool_calls[0];
  assert.equal(call.function.name, "get_weather");
  assert.equal(typeof JSON.parse(call.function.arguments).location, "string");
  messages.push(choice.message);
  messages.push({ role: "tool", tool_call_id: call.id, content: "18 C, sunny" });
  const r2 = await client.chat.completions.create({
    model, messages, tools, max_tokens: 20, temperature: 0, tool_choice: "none",
  });
  assert.ok(r2.choices[0].message.content);
});

test("multi-turn loop with the returned message appended", async () => {
  const messages = [{ role: "user", content: "Say hello." }];
  const r = await client.chat.completions.create({ model, messages, max_tokens: 8, temperature: 0 });
  messages.push(r.choices[0].message);
  messages.push({ role: "user", content: "Again." });
  const r2 = await client.chat.completions.create({ model, messages, max_tokens: 8, temperature: 0 });
  assert.ok(r2.choices[0].message.content);
});

test("streamed tool call arrives in delta.tool_calls", async () => {
  const stream = await client.chat.completions.create({
    model, tools, stream: true, max_tokens: 60, temperature: 0,
    messages: [{ role: "user", content: "What is the weather in Paris?" }],
    tool_choice: { type: "function", function: { name: "get_weather" } },
  });
  let name = "";
  let args = "";
  let finish = null;
  for await (const chunk of stream) {
    const c = chunk.choices[0];
    if (!c) continue;
    for (const t of c.delta.tool_calls ?? []) {
      assert.equal(t.index, 0);
      name += t.function?.name ?? "";
      args += t.function?.arguments ?? "";
    }
    finish = c.finish_reason ?? finish;
  }
  assert.equal(name, "get_weather");
  assert.equal(typeof JSON.parse(args).location, "string");
  assert.equal(finish, "tool_calls");
});
