// The playground's panels for what the API offers beyond plain chat, each shown only for the
// models that support it: tool definitions, a JSON schema for structured output, image
// attachments, speech to text (a file or the microphone), text to speech, and embeddings.
// Every request goes to /v1 with the session, so it is billed and rate limited as a chat is.
import { h, feedback, refreshMe } from "./core.js";

export const EXAMPLE_TOOLS = [{
  type: "function",
  function: {
    name: "get_weather",
    description: "The current weather in a city.",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
  },
}];

export const EXAMPLE_SCHEMA = {
  type: "object",
  properties: { city: { type: "string" }, country: { type: "string" } },
  required: ["city", "country"],
  additionalProperties: false,
};

// A labelled JSON text area with an "example" button; `read()` parses it (null when empty)
// or throws with the parser's message.
function jsonArea(id, label, example) {
  const area = h("textarea", { id, rows: "6", spellcheck: "false", class: "mono" });
  const fill = h("button", { type: "button", class: "link" }, "Use an example");
  fill.addEventListener("click", () => { area.value = JSON.stringify(example, null, 2); });
  return {
    el: h("div", {}, h("label", {}, label, area), fill),
    read() {
      if (!area.value.trim()) return null;
      try {
        return JSON.parse(area.value);
      } catch (e) {
        throw new Error(`${label}: not JSON (${e.message})`);
      }
    },
  };
}

export function toolsPanel() {
  const a = jsonArea("pg-tools", "Tools (a JSON array of function definitions)", EXAMPLE_TOOLS);
  const choice = h("select", { id: "pg-tool-choice" },
    [["auto", "auto: the model decides"], ["none", "none: answer in text"], ["required", "required: call a tool"]]
      .map(([v, t]) => h("option", { value: v }, t)));
  return {
    read: a.read,
    choice: () => choice.value,
    el: h("details", { class: "panel", id: "pg-tools-panel" }, h("summary", {}, "Tools"), a.el,
      h("label", {}, "Tool choice", choice)),
  };
}

export function schemaPanel() {
  const a = jsonArea("pg-schema", "JSON schema the answer must match", EXAMPLE_SCHEMA);
  return { ...a, el: h("details", { class: "panel", id: "pg-schema-panel" }, h("summary", {}, "Structured output"), a.el) };
}

// Image attachments for the next message, as data: URLs: `peek` reads them (for "Show code"),
// `take` reads them and empties the picker (for Send), `restore` attaches them again (Edit).
export function imagePanel() {
  const input = h("input", { type: "file", id: "pg-image", accept: "image/png,image/jpeg,image/webp,image/gif", multiple: true });
  const el = h("details", { class: "panel", id: "pg-image-panel" }, h("summary", {}, "Images"),
    h("label", {}, "Attach images to the next message", input));
  const peek = () => Promise.all([...input.files].map((f) => new Promise((resolve, reject) => {
    const r = new FileReader();
    r.onload = () => resolve(r.result);
    r.onerror = () => reject(new Error(`Could not read ${f.name}.`));
    r.readAsDataURL(f);
  })));
  return {
    el,
    peek,
    async take() {
      const urls = await peek();
      input.value = "";
      return urls;
    },
    // Attaches `urls` again (a turn taken back by Edit), as files made from their bytes.
    restore(urls) {
      const files = new DataTransfer();
      urls.forEach((url, i) => {
        const [head, data] = url.split(",", 2);
        const type = head.slice("data:".length).split(";")[0];
        const bytes = Uint8Array.from(atob(data), (c) => c.charCodeAt(0));
        files.items.add(new File([bytes], `image-${i + 1}.${type.split("/")[1]}`, { type }));
      });
      input.files = files.files;
      if (urls.length) el.open = true;
    },
  };
}

// Calls a paid /v1 route with the session; throws the envelope's message.
async function paid(path, init) {
  const r = await fetch(path, { method: "POST", credentials: "same-origin", ...init });
  if (!r.ok) {
    const v = await r.json().catch(() => ({}));
    throw new Error((v.error && v.error.message) || `HTTP ${r.status}`);
  }
  refreshMe();
  return r;
}

const modelOptions = (models) => models.map((m) => h("option", { value: m.id }, m.id));

// 16-bit mono WAV of Float32 samples at `rate` Hz.
function wav(samples, rate) {
  const b = new DataView(new ArrayBuffer(44 + samples.length * 2));
  const text = (o, s) => [...s].forEach((c, i) => b.setUint8(o + i, c.charCodeAt(0)));
  text(0, "RIFF"); b.setUint32(4, 36 + samples.length * 2, true); text(8, "WAVEfmt ");
  b.setUint32(16, 16, true); b.setUint16(20, 1, true); b.setUint16(22, 1, true);
  b.setUint32(24, rate, true); b.setUint32(28, rate * 2, true); b.setUint16(32, 2, true); b.setUint16(34, 16, true);
  text(36, "data"); b.setUint32(40, samples.length * 2, true);
  samples.forEach((x, i) => b.setInt16(44 + i * 2, Math.max(-1, Math.min(1, x)) * 0x7fff, true));
  return new Blob([b], { type: "audio/wav" });
}

// Records the microphone as WAV until stopped (browsers record compressed formats the server
// does not decode, so the samples are taken raw).
async function record() {
  const media = await navigator.mediaDevices.getUserMedia({ audio: true });
  const ctx = new AudioContext();
  const source = ctx.createMediaStreamSource(media);
  const node = ctx.createScriptProcessor(4096, 1, 1);
  const chunks = [];
  node.onaudioprocess = (e) => chunks.push(new Float32Array(e.inputBuffer.getChannelData(0)));
  source.connect(node);
  node.connect(ctx.destination);
  return async () => {
    node.disconnect();
    source.disconnect();
    media.getTracks().forEach((t) => t.stop());
    await ctx.close();
    const all = new Float32Array(chunks.reduce((n, c) => n + c.length, 0));
    let at = 0;
    for (const c of chunks) { all.set(c, at); at += c.length; }
    return wav(all, ctx.sampleRate);
  };
}

// Speech to text: a file or a recording, transcribed; the text can become the next message.
export function transcribePanel(models, useText) {
  const select = h("select", { id: "pg-stt-model" }, modelOptions(models));
  const file = h("input", { type: "file", id: "pg-stt-file", accept: "audio/*" });
  const out = h("p", { id: "pg-stt-text", "aria-live": "polite" });
  const meta = h("p", { class: "muted", id: "pg-stt-meta", role: "status" });
  const use = h("button", { type: "button", hidden: true }, "Use as my message");
  use.addEventListener("click", () => useText(out.textContent));
  const go = h("button", { type: "button", id: "pg-stt-go" }, "Transcribe the file");
  const mic = h("button", { type: "button", id: "pg-stt-mic", "aria-pressed": "false" }, "Record");
  let stop = null;
  const send = async (blob, name) => {
    feedback(go, null);
    meta.textContent = "Transcribing…";
    try {
      const form = new FormData();
      form.append("model", select.value);
      form.append("file", blob, name);
      form.append("response_format", "verbose_json");
      const v = await (await paid("/v1/audio/transcriptions", { body: form })).json();
      out.textContent = v.text.trim();
      use.hidden = !out.textContent;
      meta.textContent = `${Number(v.duration).toFixed(2)} s of audio`;
    } catch (e) {
      meta.textContent = "";
      feedback(go, e.message, true);
    }
  };
  go.addEventListener("click", () => (file.files[0] ? send(file.files[0], file.files[0].name) : feedback(go, "Choose an audio file first.", true)));
  mic.addEventListener("click", async () => {
    try {
      if (!stop) {
        stop = await record();
        mic.textContent = "Stop recording";
        mic.setAttribute("aria-pressed", "true");
      } else {
        const blob = await stop();
        stop = null;
        mic.textContent = "Record";
        mic.setAttribute("aria-pressed", "false");
        await send(blob, "recording.wav");
      }
    } catch (e) {
      stop = null;
      feedback(mic, `The microphone is not available: ${e.message}`, true);
    }
  });
  return h("details", { class: "panel", id: "pg-stt-panel" }, h("summary", {}, "Speech to text"),
    h("label", {}, "Transcription model", select), h("label", {}, "Audio file", file), go, mic, out, use, meta);
}

// Text to speech: played in the page, and downloadable.
export function speechPanel(models) {
  const select = h("select", { id: "pg-tts-model" }, modelOptions(models));
  const voice = h("select", { id: "pg-tts-voice" });
  const setVoices = () => {
    const m = models.find((x) => x.id === select.value);
    voice.replaceChildren(...(m ? m.voices : []).map((v) => h("option", { value: v }, v)));
  };
  select.addEventListener("change", setVoices);
  setVoices();
  const text = h("textarea", { id: "pg-tts-text", rows: "2" });
  const format = h("select", { id: "pg-tts-format" }, ["mp3", "wav", "flac"].map((f) => h("option", { value: f }, f)));
  const audio = h("audio", { id: "pg-tts-audio", controls: true, hidden: true });
  const link = h("a", { id: "pg-tts-download", hidden: true }, "Download");
  const meta = h("p", { class: "muted", id: "pg-tts-meta", role: "status" });
  const go = h("button", { type: "button", id: "pg-tts-go" }, "Speak");
  go.addEventListener("click", async () => {
    feedback(go, null);
    meta.textContent = "Synthesizing…";
    try {
      const body = { model: select.value, voice: voice.value, input: text.value, response_format: format.value };
      const r = await paid("/v1/audio/speech", { headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
      const blob = await r.blob();
      if (audio.src) URL.revokeObjectURL(audio.src);
      audio.src = URL.createObjectURL(blob);
      audio.hidden = false;
      link.href = audio.src;
      link.download = `speech.${format.value}`;
      link.hidden = false;
      meta.textContent = `${[...text.value].length} characters, ${blob.size} bytes of ${format.value}`;
    } catch (e) {
      meta.textContent = "";
      feedback(go, e.message, true);
    }
  });
  return h("details", { class: "panel", id: "pg-tts-panel" }, h("summary", {}, "Text to speech"),
    h("label", {}, "Speech model", select), h("label", {}, "Voice", voice), h("label", {}, "Format", format),
    h("label", {}, "Text to speak", text), go, audio, link, meta);
}

const cosine = (a, b) => {
  let dot = 0, na = 0, nb = 0;
  for (let i = 0; i < a.length; i++) { dot += a[i] * b[i]; na += a[i] * a[i]; nb += b[i] * b[i]; }
  return dot / Math.sqrt(na * nb);
};

// Embeddings: a few texts, one per line, and the cosine similarity of each pair.
export function embeddingsPanel(models) {
  const select = h("select", { id: "pg-emb-model" }, modelOptions(models));
  const texts = h("textarea", { id: "pg-emb-texts", rows: "4" });
  const out = h("div", { id: "pg-emb-out", "aria-live": "polite" });
  const go = h("button", { type: "button", id: "pg-emb-go" }, "Compare");
  go.addEventListener("click", async () => {
    feedback(go, null);
    const input = texts.value.split("\n").map((t) => t.trim()).filter(Boolean);
    if (input.length < 2) return feedback(go, "Write at least two texts, one per line.", true);
    try {
      const r = await paid("/v1/embeddings", { headers: { "content-type": "application/json" },
        body: JSON.stringify({ model: select.value, input }) });
      const v = await r.json();
      const vecs = v.data.sort((a, b) => a.index - b.index).map((d) => d.embedding);
      const rows = [];
      for (let i = 0; i < vecs.length; i++) {
        for (let j = i + 1; j < vecs.length; j++) {
          rows.push(h("tr", {}, h("td", {}, input[i]), h("td", {}, input[j]), h("td", { class: "num" }, cosine(vecs[i], vecs[j]).toFixed(3))));
        }
      }
      out.replaceChildren(h("table", { class: "plain" }, h("caption", {}, `Cosine similarity (${vecs[0].length} dimensions, ${v.usage.prompt_tokens} tokens)`),
        h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Text"), h("th", { scope: "col" }, "Text"), h("th", { scope: "col" }, "Similarity"))),
        h("tbody", {}, rows)));
    } catch (e) {
      feedback(go, e.message, true);
    }
  });
  return h("details", { class: "panel", id: "pg-emb-panel" }, h("summary", {}, "Embeddings"),
    h("label", {}, "Embedding model", select), h("label", {}, "Texts, one per line", texts), go, out);
}

