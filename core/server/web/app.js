// k3 chat page: plain JS, no dependencies, talks only to this server.
"use strict";

const $ = (id) => document.getElementById(id);
const DEFAULTS = {
  system: "", thinking: true, temperature: 0.8, max_tokens: 512, top_k: 40, top_p: 0.95, min_p: 0.05,
  repeat_penalty: 1, presence_penalty: 0, frequency_penalty: 0, seed: "", stop: "", api_key: "",
};
const NUMERIC = ["temperature", "max_tokens", "top_k", "top_p", "min_p", "repeat_penalty", "presence_penalty", "frequency_penalty"];

let messages = [];      // the conversation as sent to the API
let controller = null;  // AbortController of the running request
let liveRate = null;    // decode tokens/s of the stream in progress

// ---- settings ----
function loadSettings() {
  let saved = {};
  try { saved = JSON.parse(localStorage.getItem("k3.settings") || "{}"); } catch (_) { /* fresh start */ }
  const s = Object.assign({}, DEFAULTS, saved);
  for (const k of Object.keys(DEFAULTS)) {
    const el = $("s-" + k);
    if (el.type === "checkbox") el.checked = !!s[k]; else el.value = s[k];
  }
}
function readSettings() {
  const s = {};
  for (const k of Object.keys(DEFAULTS)) {
    const el = $("s-" + k);
    s[k] = el.type === "checkbox" ? el.checked : el.value;
  }
  return s;
}
function saveSettings() { localStorage.setItem("k3.settings", JSON.stringify(readSettings())); }

function authHeaders() {
  const key = $("s-api_key").value.trim();
  return key ? { Authorization: "Bearer " + key } : {};
}

function requestBody() {
  const s = readSettings();
  const body = { messages: [], stream: true, stream_options: { include_usage: true },
    chat_template_kwargs: { thinking: s.thinking, enable_thinking: s.thinking } };
  if (s.system.trim()) body.messages.push({ role: "system", content: s.system });
  body.messages.push(...messages);
  for (const k of NUMERIC) {
    if (s[k] !== "" && !isNaN(Number(s[k]))) body[k] = Number(s[k]);
  }
  if (s.seed !== "" && !isNaN(Number(s.seed))) body.seed = Number(s.seed);
  const stops = s.stop.split("\n").filter((x) => x !== "");
  if (stops.length) body.stop = stops;
  return body;
}

// ---- conversation view ----
function addMessage(role, text) {
  $("empty").hidden = true;
  const el = document.createElement("div");
  el.className = "msg " + role;
  el.innerHTML = '<div class="who"></div><div class="parts"></div><div class="text"></div>';
  el.querySelector(".who").textContent = role === "user" ? "You" : "Assistant";
  el.querySelector(".text").textContent = text || "";
  $("conversation").appendChild(el);
  scrollDown(true);
  return el;
}

function reasoningBox(el) {
  let d = el.querySelector("details.reasoning");
  if (!d) {
    d = document.createElement("details");
    d.className = "reasoning";
    d.open = true;
    d.innerHTML = '<summary>Reasoning</summary><div class="rtext"></div>';
    el.querySelector(".parts").appendChild(d);
  }
  return d;
}

function nearBottom() {
  const c = $("conversation");
  return c.scrollHeight - c.scrollTop - c.clientHeight < 80;
}
function scrollDown(force) {
  const c = $("conversation");
  if (force || nearBottom()) c.scrollTop = c.scrollHeight;
}

// ---- streaming ----
async function* sseData(response) {
  const reader = response.body.getReader();
  const dec = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += dec.decode(value, { stream: true });
    let i;
    while ((i = buf.indexOf("\n\n")) >= 0) {
      const event = buf.slice(0, i);
      buf = buf.slice(i + 2);
      for (const line of event.split("\n")) {
        if (line.startsWith("data: ")) yield line.slice(6);
      }
    }
  }
}

async function generate() {
  const el = addMessage("assistant", "");
  el.classList.add("streaming");
  const textEl = el.querySelector(".text");
  const reply = { role: "assistant", content: "", reasoning_content: "" };
  const calls = [];
  setBusy(true);
  controller = new AbortController();
  let started = 0, tokens = 0, finish = null, timings = null;
  try {
    const res = await fetch("v1/chat/completions", {
      method: "POST", signal: controller.signal,
      headers: Object.assign({ "Content-Type": "application/json" }, authHeaders()),
      body: JSON.stringify(requestBody()),
    });
    if (!res.ok) {
      let msg = res.status + " " + res.statusText;
      try { msg = (await res.json()).error.message; } catch (_) { /* not JSON */ }
      if (res.status === 401) msg += " — set the API key in Settings.";
      throw new Error(msg);
    }
    for await (const data of sseData(res)) {
      if (data === "[DONE]") break;
      const chunk = JSON.parse(data);
      if (chunk.error) throw new Error(chunk.error.message);
      if (chunk.timings) timings = chunk.timings;
      const ch = chunk.choices && chunk.choices[0];
      if (!ch) continue;
      if (ch.finish_reason) finish = ch.finish_reason;
      const d = ch.delta || {};
      if (d.reasoning_content || d.content || d.tool_calls) {
        tokens++;
        if (!started) started = performance.now();
        const secs = (performance.now() - started) / 1000;
        if (secs > 0.2) { liveRate = (tokens - 1) / secs; $("st-decode").textContent = liveRate.toFixed(1); }
      }
      if (d.reasoning_content) {
        reply.reasoning_content += d.reasoning_content;
        reasoningBox(el).querySelector(".rtext").textContent = reply.reasoning_content;
      }
      if (d.content) {
        reply.content += d.content;
        textEl.textContent = reply.content;
        const r = el.querySelector("details.reasoning");
        if (r && r.open && !r.dataset.touched) r.open = false;
      }
      for (const tc of d.tool_calls || []) {
        const c = calls[tc.index] || (calls[tc.index] = { id: tc.id, type: "function", function: { name: "", arguments: "" } });
        if (tc.function && tc.function.name) c.function.name = tc.function.name;
        if (tc.function && tc.function.arguments) c.function.arguments += tc.function.arguments;
        renderCalls(el, calls);
      }
      scrollDown(false);
    }
  } catch (err) {
    if (err.name !== "AbortError") {
      const e = document.createElement("div");
      e.className = "error";
      e.textContent = "Error: " + err.message;
      el.appendChild(e);
    } else {
      finish = "stopped";
    }
  } finally {
    el.classList.remove("streaming");
    controller = null;
    liveRate = null;
    setBusy(false);
  }
  const r = el.querySelector("details.reasoning");
  if (r) r.querySelector("summary").textContent = "Reasoning (" + reply.reasoning_content.length + " chars)";
  if (calls.length) reply.tool_calls = calls;
  if (reply.content || reply.reasoning_content || calls.length) messages.push(reply);
  const meta = document.createElement("div");
  meta.className = "meta";
  const parts = [];
  if (finish) parts.push(finish);
  if (timings) {
    parts.push(timings.prompt_n + " prompt tok @ " + timings.prompt_per_second.toFixed(1) + " tok/s");
    parts.push(timings.predicted_n + " tok @ " + timings.predicted_per_second.toFixed(1) + " tok/s");
    if (timings.cache_n) parts.push(timings.cache_n + " cached");
  }
  meta.textContent = parts.join(" · ");
  el.appendChild(meta);
  refreshStatus();
}

function renderCalls(el, calls) {
  const box = el.querySelector(".parts");
  box.querySelectorAll(".toolcall").forEach((n) => n.remove());
  for (const c of calls) {
    const n = document.createElement("div");
    n.className = "toolcall";
    n.textContent = "→ " + c.function.name + "(" + c.function.arguments + ")";
    box.appendChild(n);
  }
}

function setBusy(busy) {
  $("send").hidden = busy;
  $("stop").hidden = !busy;
  $("regenerate").disabled = busy || !messages.some((m) => m.role === "user");
  $("input").disabled = false;
}

function send(ev) {
  if (ev) ev.preventDefault();
  if (controller) return;
  const text = $("input").value;
  if (!text.trim()) return;
  $("input").value = "";
  autosize();
  messages.push({ role: "user", content: text });
  addMessage("user", text);
  generate();
}

function regenerate() {
  if (controller) return;
  // Drop the last reply (and its view) and answer the last user message again.
  const nodes = $("conversation").querySelectorAll(".msg");
  const last = nodes[nodes.length - 1];
  if (last && last.classList.contains("assistant")) {
    last.remove();
    if (messages.length && messages[messages.length - 1].role === "assistant") messages.pop();
  }
  if (messages.length && messages[messages.length - 1].role === "user") generate();
}

function newChat() {
  if (controller) controller.abort();
  messages = [];
  $("conversation").querySelectorAll(".msg").forEach((n) => n.remove());
  $("empty").hidden = false;
  setBusy(false);
  $("input").focus();
}

function autosize() {
  const t = $("input");
  t.style.height = "auto";
  t.style.height = Math.min(t.scrollHeight, window.innerHeight * 0.4) + "px";
}

// ---- status bar ----
function fmtBytes(n) {
  if (!n) return "0";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return n.toFixed(n < 10 && i ? 1 : 0) + " " + u[i];
}

async function refreshStatus() {
  const state = $("st-state");
  try {
    const res = await fetch("status", { headers: authHeaders() });
    if (res.status === 401) { state.className = "stat down"; state.querySelector("b").textContent = "API key needed"; return; }
    const s = await res.json();
    state.className = "stat " + (s.ready ? "ready" : "");
    state.querySelector("b").textContent = s.ready ? (s.requests_processing ? "generating" : "ready") : "loading model";
    if (s.model) { $("model-name").textContent = s.model + " · ctx " + s.context_length; $("empty-model").textContent = s.model; }
    if (s.requests_total > 0) {
      $("st-prefill").textContent = s.last_prefill_tokens_per_second.toFixed(1);
      if (liveRate === null) $("st-decode").textContent = s.last_decode_tokens_per_second.toFixed(1);
    }
    const lookups = s.expert_cache_hits + s.expert_cache_misses;
    $("st-hits").textContent = lookups ? (100 * s.expert_cache_hit_rate).toFixed(1) + "% hit" : "no cache";
    $("st-mem").textContent = fmtBytes(s.resident_bytes) + (s.memory_budget_bytes ? " / " + fmtBytes(s.memory_budget_bytes) : "");
    const bar = $("st-membar");
    const frac = s.memory_budget_bytes ? s.resident_bytes / s.memory_budget_bytes : 0;
    bar.style.width = Math.min(100, 100 * frac).toFixed(1) + "%";
    bar.classList.toggle("over", frac > 1);
    $("st-queue").textContent = s.requests_processing + " / " + s.requests_deferred;
  } catch (_) {
    state.className = "stat down";
    state.querySelector("b").textContent = "server unreachable";
  }
}

// ---- wiring ----
loadSettings();
$("composer").addEventListener("submit", send);
$("input").addEventListener("keydown", (e) => { if (e.key === "Enter" && !e.shiftKey && !e.isComposing) send(e); });
$("input").addEventListener("input", autosize);
$("stop").addEventListener("click", () => controller && controller.abort());
$("regenerate").addEventListener("click", regenerate);
$("new-chat").addEventListener("click", newChat);
$("toggle-settings").addEventListener("click", () => {
  const a = $("settings");
  a.hidden = !a.hidden;
  $("toggle-settings").setAttribute("aria-expanded", String(!a.hidden));
});
$("settings").addEventListener("change", saveSettings);
$("reset-settings").addEventListener("click", () => { localStorage.removeItem("k3.settings"); loadSettings(); });
$("conversation").addEventListener("toggle", (e) => { if (e.target.matches("details.reasoning")) e.target.dataset.touched = "1"; }, true);
if (window.innerWidth < 900) $("settings").hidden = true;
setBusy(false);
refreshStatus();
setInterval(refreshStatus, 2000);
$("input").focus();
