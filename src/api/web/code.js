// "Show code": the playground's current request as a ready-to-run curl command, Python script
// (openai SDK) and Node script (openai SDK), reading the key from TOLLGATE_API_KEY. Not
// streamed, so each prints the whole answer.
import { h } from "./core.js";

// The request as the snippets send it: the playground's body without its streaming options.
function plain(body) {
  const { stream, stream_options, ...rest } = body;
  return rest;
}

// The body goes in on standard input (a quoted here-document: nothing in it is expanded), not
// as an argument: Linux refuses a single argument over 128 KiB, which an attached photo passes.
// JSON.stringify writes no raw newline, so the body is one line and cannot end the document.
export function curlSnippet(base, body) {
  return [
    `curl -s ${base}/chat/completions \\`,
    `  -H "Authorization: Bearer $TOLLGATE_API_KEY" \\`,
    `  -H 'Content-Type: application/json' \\`,
    `  --data-binary @- <<'JSON'`,
    JSON.stringify(plain(body)),
    "JSON",
  ].join("\n");
}

// A JSON value as a Python literal (strings in JSON's escapes, which Python reads the same).
function pyLiteral(v, indent = "") {
  const inner = indent + "    ";
  if (v === null) return "None";
  if (v === true) return "True";
  if (v === false) return "False";
  if (Array.isArray(v)) {
    if (!v.length) return "[]";
    return `[\n${v.map((x) => inner + pyLiteral(x, inner)).join(",\n")},\n${indent}]`;
  }
  if (typeof v === "object") {
    const keys = Object.keys(v);
    if (!keys.length) return "{}";
    return `{\n${keys.map((k) => `${inner}${JSON.stringify(k)}: ${pyLiteral(v[k], inner)}`).join(",\n")},\n${indent}}`;
  }
  return JSON.stringify(v);
}

export function pythonSnippet(base, body) {
  return [
    "import os",
    "from openai import OpenAI",
    "",
    `client = OpenAI(base_url=${JSON.stringify(base)}, api_key=os.environ["TOLLGATE_API_KEY"])`,
    `request = ${pyLiteral(plain(body))}`,
    "response = client.chat.completions.create(**request)",
    "message = response.choices[0].message",
    "print(message.content if message.content is not None else message.tool_calls)",
  ].join("\n");
}

export function nodeSnippet(base, body) {
  return [
    'import OpenAI from "openai";',
    "",
    `const client = new OpenAI({ baseURL: ${JSON.stringify(base)}, apiKey: process.env.TOLLGATE_API_KEY });`,
    `const request = ${JSON.stringify(plain(body), null, 2)};`,
    "const response = await client.chat.completions.create(request);",
    "const message = response.choices[0].message;",
    "console.log(message.content ?? JSON.stringify(message.tool_calls));",
  ].join("\n");
}

// The three snippets for `body`, each in a labelled, read-only block.
export function codeView(body) {
  const base = `${location.origin}/v1`;
  const block = (id, title, text) => h("div", { class: "snippet" },
    h("h3", {}, title), h("pre", { id, tabindex: "0", "aria-label": `${title} code` }, text));
  return h("div", { class: "code", id: "pg-code" },
    h("p", { class: "muted" }, "Set TOLLGATE_API_KEY to one of your API keys, then run:"),
    block("pg-code-curl", "curl", curlSnippet(base, body)),
    block("pg-code-python", "Python", pythonSnippet(base, body)),
    block("pg-code-node", "Node", nodeSnippet(base, body)));
}
