// The MCP Inspector's CLI (`@modelcontextprotocol/inspector`, the official debugging client)
// against the running tollgate's /mcp: every tool once, with its optional arguments given on the
// command line as the Inspector takes them (`--tool-arg key=value`; it converts each value by the
// type the tool's input schema declares, so a nullable declaration would send numbers and
// booleans as strings and fail). Started by scripts/test with TOLLGATE_BASE_URL.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import path from "node:path";

// `npx @modelcontextprotocol/inspector --cli ...`, from this suite's node_modules.
const inspector = path.join(import.meta.dirname, "node_modules", ".bin", "mcp-inspector");
const mcpUrl = process.env.TOLLGATE_BASE_URL.replace(/\/v1\/?$/, "/mcp");
const MODEL = "smollm2-135m-instruct";

function call(tool, args = {}) {
  const argv = ["--cli", mcpUrl, "--transport", "http", "--method", "tools/call", "--tool-name", tool];
  for (const [k, v] of Object.entries(args)) argv.push("--tool-arg", `${k}=${v}`);
  const out = execFileSync(inspector, argv, { encoding: "utf8", timeout: 60_000 });
  const response = JSON.parse(out);
  assert.ok(!response.isError, `${tool}: ${out}`);
  assert.ok(response.structuredContent, `${tool}: no structured content: ${out}`);
  return response.structuredContent;
}

test("the Inspector CLI calls every tool with its optional arguments", () => {
  const listed = call("list_models", { max_input_price: "0.05", commercial_use: "true", sort: "price", min_context: "4096" });
  assert.ok(listed.count > 0 && listed.models.every((m) => m.commercial_use && m.context_length >= 4096));
  assert.equal(typeof listed.models[0].available, "boolean");

  assert.equal(call("get_model", { id: MODEL }).id, MODEL);
  assert.equal(call("get_prices").currency, "USD");

  const est = call("estimate_cost", {
    model: MODEL, prompt: "Bonjour tout le monde, comment allez-vous aujourd'hui ?",
    expected_output_tokens: "16", max_tokens: "32", language: "fr",
  });
  assert.equal(est.completion_tokens, 16);
  assert.equal(est.language, "fra");
  assert.ok(est.fits_context && est.hold_micros >= est.cost_micros);
  const given = call("estimate_cost", { model: MODEL, prompt_tokens: "100000" });
  assert.equal(given.fits_context, false);
  assert.match(given.warning, /context_length_exceeded/);
  const audio = call("estimate_cost", { model: "whisper-base", audio_seconds: "6.5" });
  assert.equal(audio.audio_seconds, 7);

  const langs = call("language_costs", { model: MODEL, language: "ja", limit: "5", offset: "0" });
  assert.equal(langs.models[0].model, MODEL);
  assert.deepEqual(Object.keys(langs.models[0].languages), ["jpn"]);

  const hits = call("search_reference", { query: "idempotency retry", limit: "2" });
  assert.ok(hits.results.length >= 1 && hits.results.length <= 2);
  assert.match(call("get_reference", { id: hits.results[0].id }).markdown, /Idempotency-Key/);
});
