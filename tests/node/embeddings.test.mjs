// `POST /v1/embeddings` through the official `openai` Node SDK (real all-MiniLM-L6-v2 weights):
// float and base64 vectors agree with each other and with sentence-transformers' vector of the
// same text (the committed fixture), with the tokenizer's count in `usage`.
// Run by scripts/test with TOLLGATE_BASE_URL and TOLLGATE_API_KEY: `node --test tests/node`.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import OpenAI from "openai";

const client = new OpenAI({
  baseURL: process.env.TOLLGATE_BASE_URL,
  apiKey: process.env.TOLLGATE_API_KEY,
  maxRetries: 0,
});
const model = "all-MiniLM-L6-v2";
const fixture = JSON.parse(
  readFileSync(new URL("../fixtures/embeddings/all-MiniLM-L6-v2.json", import.meta.url)),
).items.slice(0, 4);

const unpack = (b64) => {
  const buf = Buffer.from(b64, "base64");
  return Array.from({ length: buf.length / 4 }, (_, i) => buf.readFloatLE(i * 4));
};
const cosine = (a, b) => {
  let dot = 0, na = 0, nb = 0;
  a.forEach((x, i) => { dot += x * b[i]; na += x * x; nb += b[i] * b[i]; });
  return dot / Math.sqrt(na * nb);
};

for (const encoding_format of ["float", "base64"]) {
  test(`embeddings.create with encoding_format ${encoding_format}`, async () => {
    const r = await client.embeddings.create({
      model,
      input: fixture.map((it) => it.text),
      encoding_format,
    });
    assert.equal(r.object, "list");
    assert.equal(r.data.length, fixture.length);
    r.data.forEach((d, i) => {
      assert.equal(d.index, i);
      const v = typeof d.embedding === "string" ? unpack(d.embedding) : d.embedding;
      assert.equal(v.length, 384);
      assert.ok(cosine(v, unpack(fixture[i].vector_f32_le_base64)) >= 0.9999, fixture[i].text);
    });
    const tokens = fixture.reduce((n, it) => n + it.tokens, 0);
    assert.equal(r.usage.prompt_tokens, tokens);
    assert.equal(r.usage.total_tokens, tokens);
  });
}

test("the SDK's default (base64, decoded by the SDK) gives numbers", async () => {
  const r = await client.embeddings.create({ model, input: fixture[0].text });
  assert.ok(Array.isArray(r.data[0].embedding));
  assert.ok(cosine(r.data[0].embedding, unpack(fixture[0].vector_f32_le_base64)) >= 0.9999);
});
