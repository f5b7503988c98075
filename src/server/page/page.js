// The chat page lockstep serves at / (docs/server.md, "The chat page").  Same origin as
// the API, no third-party code, nothing inline (the server sends a strict CSP).
"use strict";
const $ = (id) => document.getElementById(id);
const KEY = "lockstep-api-key";
const chat = [];          // the conversation: {role, content}
let running = null;       // the AbortController of the request in flight

function setState(s, msg) {
  document.body.dataset.state = s;
  $("status").textContent = msg || "";
  $("send").disabled = s === "busy";
  $("stop").disabled = s !== "busy";
}

function headers() {
  const h = { "Content-Type": "application/json" };
  const k = sessionStorage.getItem(KEY);
  if (k) h.Authorization = "Bearer " + k;
  return h;
}

// A server of several models (router mode): /health lists them, the picker names one.
let routed = false;

// The sampling fields as request parameters (empty fields are left out: the server's default),
// and the picked model on a server of several.
function params() {
  const p = {};
  if (routed) p.model = $("models").value;
  const num = (id) => $(id).value.trim() === "" ? null : Number($(id).value);
  const t = num("temperature"), tp = num("top_p"), mt = num("max_tokens"), sd = num("seed");
  if (t !== null) p.temperature = t;
  if (tp !== null) p.top_p = tp;
  if (mt !== null) p.max_tokens = mt;
  if (sd !== null) p.seed = sd;
  return p;
}

async function errorText(r) {
  let msg = "HTTP " + r.status;
  try {
    const j = await r.json();
    if (j.error && j.error.message) msg += ": " + j.error.message;
  } catch (e) { /* not JSON */ }
  if (r.status === 401) msg += " (enter the server's API key on the right)";
  return msg;
}

// POSTs a streamed chat request; onDelta(text so far) as chunks arrive.  Resolves to the
// reply: its text, reasoning, seed, system_fingerprint, finish_reason, usage and timings.
async function streamChat(body, onDelta, signal) {
  const r = await fetch("/v1/chat/completions", { method: "POST", headers: headers(), body: JSON.stringify(body), signal });
  if (!r.ok) throw new Error(await errorText(r));
  const out = { text: "", reasoning: "", seed: null, fingerprint: "", finish: null, usage: null, timings: null };
  const reader = r.body.getReader(), dec = new TextDecoder("utf-8");
  let buf = "";
  const take = (data) => {
    if (data === "[DONE]") return;
    const j = JSON.parse(data);
    if (j.error) throw new Error(j.error.message || "error");
    if (j.seed !== undefined) out.seed = j.seed;
    if (j.system_fingerprint) out.fingerprint = j.system_fingerprint;
    if (j.usage) out.usage = j.usage;
    if (j.timings) out.timings = j.timings;
    for (const c of j.choices || []) {
      const d = c.delta || {};
      if (typeof d.content === "string") out.text += d.content;
      if (typeof d.reasoning_content === "string") out.reasoning += d.reasoning_content;
      if (c.finish_reason) out.finish = c.finish_reason;
    }
  };
  for (;;) {
    const { value, done } = await reader.read();
    buf += dec.decode(value || new Uint8Array(), { stream: !done });
    let i;
    while ((i = buf.indexOf("\n\n")) >= 0) {
      const ev = buf.slice(0, i);
      buf = buf.slice(i + 2);
      for (const line of ev.split("\n")) if (line.startsWith("data: ")) take(line.slice(6));
      onDelta(out);
    }
    if (done) break;
  }
  return out;
}

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function addMessage(role, content) {
  const m = el("div", "msg " + role);
  m.appendChild(el("div", "role", role));
  const t = el("div", "text", content);
  m.appendChild(t);
  $("chat").appendChild(m);
  m.scrollIntoView({ block: "end" });
  return m;
}

function draftLine(t) {
  if (!t || !t.draft_n) return "";
  const pct = (100 * t.draft_accepted / t.draft_n).toFixed(0);
  return `draft: ${t.draft_accepted} of ${t.draft_n} accepted (${pct} %)`;
}

// The reply's replay fields, and a button that sends the same request with its seed and
// compares what comes back with the text this page shows for the reply.
function addMeta(m, body, reply) {
  const meta = el("div", "meta");
  const bits = [`seed ${reply.seed}`, reply.fingerprint, `finish: ${reply.finish}`];
  if (reply.usage) bits.push(`${reply.usage.prompt_tokens} + ${reply.usage.completion_tokens} tokens`);
  const d = draftLine(reply.timings);
  if (d) bits.push(d);
  meta.appendChild(el("span", "fields", bits.join(" · ")));
  const b = el("button", "replay", "replay");
  b.type = "button";
  b.title = "send this request again with seed " + reply.seed + " and compare the bytes";
  const res = el("div", "replay-result");
  b.addEventListener("click", () => replay(body, reply, m.querySelector(":scope > .text"), b, res));
  meta.appendChild(b);
  m.appendChild(meta);
  m.appendChild(res);
}

// The first position where a and b differ (-1 when equal).
function firstDiff(a, b) {
  if (a === b) return -1;
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a[i] === b[i]) i++;
  return i;
}

async function replay(body, reply, shown, button, res) {
  const again = Object.assign({}, body, { seed: reply.seed });
  button.disabled = true;
  res.className = "replay-result";
  res.textContent = "replaying with seed " + reply.seed + " …";
  try {
    const r = await streamChat(again, () => {}, undefined);
    const a = reply.reasoning + "\u0000" + shown.textContent, b = r.reasoning + "\u0000" + r.text;
    const at = firstDiff(a, b);
    const bytes = new TextEncoder().encode(r.text).length;
    if (at < 0) {
      res.dataset.verdict = "identical";
      res.classList.add("ok");
      res.textContent = `replay: identical (${bytes} bytes, seed ${r.seed}, ${r.fingerprint})`;
    } else {
      res.dataset.verdict = "different";
      res.classList.add("bad");
      res.textContent = `replay: DIFFERENT from character ${Math.max(0, at - reply.reasoning.length - 1)}` +
        (r.fingerprint !== reply.fingerprint ? ` (fingerprint ${reply.fingerprint} → ${r.fingerprint})` : "");
      res.appendChild(el("pre", "diff", "original: …" + a.slice(at, at + 200) + "\nreplay:   …" + b.slice(at, at + 200)));
    }
  } catch (e) {
    res.dataset.verdict = "error";
    res.classList.add("bad");
    res.textContent = "replay failed: " + e.message;
  }
  button.disabled = false;
  res.scrollIntoView({ block: "nearest" });
}

async function send(text) {
  if (running) return;
  chat.push({ role: "user", content: text });
  addMessage("user", text);
  const sys = $("system").value;
  const body = Object.assign({ messages: (sys ? [{ role: "system", content: sys }] : []).concat(chat) }, params(),
                             { stream: true, stream_options: { include_usage: true } });
  const m = addMessage("assistant", "");
  const t = m.querySelector(".text");
  running = new AbortController();
  setState("busy", "generating …");
  try {
    const reply = await streamChat(body, (o) => { t.textContent = o.text; }, running.signal);
    t.textContent = reply.text;
    if (routed) props().then(health); // the model is loaded now: its properties and verdict
    if (reply.reasoning) {
      const r = el("details", "reasoning");
      r.appendChild(el("summary", null, "reasoning"));
      r.appendChild(el("div", "text", reply.reasoning));
      m.insertBefore(r, t);
    }
    chat.push({ role: "assistant", content: reply.text });
    addMeta(m, body, reply);
    setState("idle", "");
  } catch (e) {
    chat.pop(); // the turn did not happen: the user message can be sent again
    m.classList.add("error");
    t.textContent = e.name === "AbortError" ? "(stopped)" : e.message;
    setState("idle", e.name === "AbortError" ? "stopped" : "error");
  }
  running = null;
}

async function health() {
  try {
    const r = await fetch("/health");
    let j = await r.json();
    const p = $("parity");
    if (j.status !== "ok") {
      p.textContent = "server: " + j.status;
      setTimeout(health, 1000);
      return;
    }
    if (j.models) { // several models: the picked one's verdict ("pending" until it first loads)
      routed = true;
      const sel = $("models");
      if (!sel.options.length) for (const m of j.models) sel.add(new Option(m.id, m.id));
      sel.hidden = false;
      const m = j.models.find((x) => x.id === sel.value) || {};
      j = Object.assign({}, m, { spec: m.spec_state });
    }
    p.textContent = "parity: " + j.parity;
    p.dataset.parity = j.parity;
    p.classList.toggle("ok", j.parity === "verified");
    p.classList.toggle("bad", j.parity === "failed");
    $("spec").textContent = j.spec === "off" ? "spec: off" : "spec: " + j.spec_state;
    if (j.parity_detail) p.title = j.parity_detail;
    if (!routed && !$("model").textContent) props(); // asked before the model was loaded: 503 then
  } catch (e) {
    $("parity").textContent = "server unreachable";
    setTimeout(health, 2000);
  }
}

async function props() {
  if (routed && !$("models").value) return;
  const q = routed ? "?model=" + encodeURIComponent($("models").value) : "";
  const r = await fetch("/props" + q, { headers: headers() });
  if (!r.ok) {
    $("server").textContent = await errorText(r);
    return;
  }
  const j = await r.json();
  $("model").textContent = j.model;
  $("server").textContent = [`model: ${j.model}`, `template: ${j.chat_template || "none"}`, `context: ${j.n_ctx}`,
    `slots: ${j.total_slots}`, `fingerprint: ${j.system_fingerprint}`, `parity: ${j.parity}`, j.build_info].join("\n");
}

document.addEventListener("DOMContentLoaded", () => {
  $("apikey").value = sessionStorage.getItem(KEY) || "";
  $("apikey").addEventListener("change", () => {
    const k = $("apikey").value.trim();
    if (k) sessionStorage.setItem(KEY, k); else sessionStorage.removeItem(KEY);
    props();
  });
  $("composer").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const text = $("input").value;
    if (!text.trim() || running) return;
    $("input").value = "";
    send(text);
  });
  $("input").addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && !ev.shiftKey) {
      ev.preventDefault();
      $("composer").requestSubmit();
    }
  });
  $("stop").addEventListener("click", () => running && running.abort());
  $("clear").addEventListener("click", () => {
    if (running) running.abort();
    chat.length = 0;
    $("chat").textContent = "";
  });
  $("models").addEventListener("change", () => { // loads the picked model, then shows its verdict
    props().then(health);
  });
  setState("idle", "");
  health().then(() => routed || props()); // several models: none is loaded until one is used
});
