// Images through the official `openai` Node SDK, run by tests/python/test_vision.py against a
// server on the tiny vision fixture catalogue (tests/data/vision/models.toml): a chat request and
// a Responses request with the square fixture image as a data: URL on `smolvlm`, and the same
// image to `text-only`. Prints one JSON line with what the test checks.
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import OpenAI from "openai";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const png = fs.readFileSync(path.join(root, "tests/data/vision/images/square.png"));
const url = `data:image/png;base64,${png.toString("base64")}`;
const client = new OpenAI({
  baseURL: process.env.TOLLGATE_BASE_URL,
  apiKey: process.env.TOLLGATE_API_KEY,
  maxRetries: 0,
});

const chat = await client.chat.completions.create({
  model: "smolvlm",
  max_tokens: 5,
  temperature: 0,
  messages: [{ role: "user", content: [
    { type: "image_url", image_url: { url } },
    { type: "text", text: "Describe this." },
  ] }],
});
const response = await client.responses.create({
  model: "smolvlm",
  max_output_tokens: 5,
  temperature: 0,
  input: [{ role: "user", content: [
    { type: "input_image", image_url: url, detail: "auto" },
    { type: "input_text", text: "Describe this." },
  ] }],
});
let refused = null;
try {
  await client.chat.completions.create({
    model: "text-only",
    max_tokens: 5,
    messages: [{ role: "user", content: [{ type: "image_url", image_url: { url } }] }],
  });
} catch (e) {
  refused = e.code ?? e.error?.code ?? String(e);
}
console.log(JSON.stringify({
  chat_prompt_tokens: chat.usage.prompt_tokens,
  responses_input_tokens: response.usage.input_tokens,
  refused,
}));
